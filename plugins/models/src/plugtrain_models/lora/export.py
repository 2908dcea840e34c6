"""Exporting a LoRA checkpoint: adapters folded into the base weights, or as a PEFT adapter.

``plugtrain checkpoint convert CKPT --src-fmt plugtrain --tgt-fmt hf --config RUN.yaml`` calls
:func:`fold_for_export` (declared on the ``Lora`` callback of the run file) before writing
the Hugging Face folder: each ``W`` becomes ``W + B A * alpha / r`` (an embedding's ``W +
(B A)^T * alpha / r``) and the adapters are dropped, as Model Zoo's ``fold_lora_checkpoint.py``
does; a tied embedding and head of which one was adapted are untied
(``share_embedding_weights: false``). ``--tgt-fmt hf-peft`` calls :func:`export_peft_adapter`:
``adapter_config.json`` and ``adapter_model.safetensors`` in PEFT's names, which
``peft.PeftModel.from_pretrained(base, folder)`` loads on the base exported to Hugging Face.

The scaling of each layer is the one the checkpoint recorded (the ``Lora`` callback's state);
a file without it takes ``alpha`` from the run file's only group and ``r`` from the adapter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from plugtrain_models.lora.checkpoints import base_fingerprint, read_base_weights
from plugtrain_models.lora.config import lora_configs

__all__ = ["adapters_in", "export_peft_adapter", "fold_for_export"]

_A, _B = ".lora_A", ".lora_B"


def _recorded(source: Path) -> Mapping[str, Any]:
    """The ``Lora`` callback's saved state in the checkpoint at ``source`` (empty: none)."""
    state = torch.load(source, map_location="cpu", weights_only=True, mmap=True)
    for entry in state.get("callbacks") or [] if isinstance(state, Mapping) else []:
        if isinstance(entry, Mapping) and entry.get("name") == "Lora":
            return entry.get("state") or {}
    return {}


def adapters_in(
    state: Mapping[str, torch.Tensor], arguments: Mapping[str, Any], recorded: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each adapted layer of ``state``: ``{"A", "B", "r", "alpha", "scaling", "kind"}``.

    :raises ValueError: the scaling is neither recorded nor given by a single group.
    """
    layers = dict(recorded.get("layers") or {})
    configs = lora_configs(arguments["lora_params"]) if "lora_params" in arguments else []
    found: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in state if n.endswith(_A)):
        layer = name.removesuffix(_A)
        key = layer.removeprefix("model.") if layer.removeprefix("model.") in layers else layer
        a, b = state[name], state[layer + _B]
        entry = dict(layers.get(key) or layers.get(layer) or {})
        if not entry:
            if len({c.alpha for c in configs}) != 1:
                message = (
                    f"{layer}: the checkpoint records no LoRA scaling and the run file's "
                    "lora_params has several groups: cannot tell its alpha"
                )
                raise ValueError(message)
            weight = state.get(layer + ".weight")
            kind = "linear" if weight is not None and weight.shape[1] == a.shape[1] else "embedding"
            r = a.shape[0]
            entry = {
                "kind": kind,
                "r": r,
                "alpha": configs[0].alpha,
                "scaling": configs[0].alpha / r,
            }
        found[layer] = {**entry, "A": a, "B": b}
    return found


def _delta(adapter: Mapping[str, Any]) -> torch.Tensor:
    a, b = adapter["A"].float(), adapter["B"].float()
    delta: torch.Tensor = (b @ a) * float(adapter["scaling"])
    return delta.transpose(0, 1) if adapter["kind"] == "embedding" else delta


def fold_for_export(
    state: Mapping[str, torch.Tensor],
    arguments: Mapping[str, Any],
    model_name: str,
    model_keys: Mapping[str, Any],
    source: str | Path,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``state`` with every adapter folded into its weight, and the model keys to export with.

    An adapter-only checkpoint's base is read from the file it names. The folded weights take
    the dtype of the base the run started from (a ``bfloat16`` base exports ``bfloat16``
    whatever precision the run trained and saved in); without a recorded base, the
    checkpoint's own dtype.
    """
    recorded = _recorded(Path(source))
    state = _as_float32_model(state)
    adapters = adapters_in(state, arguments, recorded)
    folded = dict(state)
    base_path = (recorded.get("base") or {}).get("path")
    if adapters and base_path and not any(n.endswith(".weight") for n in state):
        base = read_base_weights(base_path, model_name)
        folded = {**{n if n.startswith("model.") else f"model.{n}": t for n, t in base.items()}}
        _check_base(folded, recorded, base_path)
        folded.update(state)
    keys = dict(model_keys)
    storages: dict[int, list[str]] = {}
    for name, tensor in folded.items():
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            storages.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    for layer, adapter in adapters.items():
        weight_name = layer + ".weight"
        weight = folded[weight_name]
        merged = (weight.float() + _delta(adapter)).to(weight.dtype)
        shared = storages.get(weight.untyped_storage().data_ptr(), [])
        if len([n for n in shared if n.endswith(".weight")]) > 1:
            keys["share_embedding_weights"] = False  # as Model Zoo's folding tool does
            for other in shared:
                if other != weight_name and other not in (f"{a}.weight" for a in adapters):
                    folded[other] = weight.clone()
        folded[weight_name] = merged
        del folded[layer + _A], folded[layer + _B]
    dtype = _base_dtype(base_path) if adapters and base_path else None
    if dtype is not None:
        folded = {
            n: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
            for n, t in folded.items()
        }
    return folded, keys


def _as_float32_model(state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """``state`` as a float32 model saves it, whatever its fit held in bfloat16.

    A fit under bfloat16 autocast saves the frozen weights it held in bfloat16
    (:mod:`.bfloat16_base`) as they were held. With float32 adapters, each bfloat16 tensor
    becomes float32 (exactly: the values are bfloat16 values), once per tensor shared by
    several names. Adapters of another type (a model built in it) leave the state as it is.
    """
    kinds = {t.dtype for n, t in state.items() if n.endswith((_A, _B))}
    if kinds != {torch.float32}:
        return state
    widened: dict[tuple[Any, ...], torch.Tensor] = {}
    found = dict(state)
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16:
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
            found[name] = widened.setdefault(key, tensor.float())
    return found


def _base_dtype(path: str) -> torch.dtype | None:
    """The floating dtype of the base at ``path``: ``config.json``'s, or its first tensor's."""
    where = Path(path)
    if not where.exists():
        return None
    hf_file = where.suffix == ".safetensors" or where.name.endswith(".index.json")
    if where.is_dir() or hf_file:
        config = (where if where.is_dir() else where.parent) / "config.json"
        hf = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
        named = hf.get("torch_dtype") or hf.get("dtype")
        dtype = getattr(torch, named, None) if isinstance(named, str) else None
        return dtype if isinstance(dtype, torch.dtype) else None
    state = torch.load(where, map_location="cpu", weights_only=True, mmap=True)
    weights = state.get("model", state) if isinstance(state, Mapping) else {}
    for tensor in weights.values():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            return tensor.dtype
    return None


def _check_base(base: Mapping[str, Any], recorded: Mapping[str, Any], path: str) -> None:
    """Refuse base weights other than those the adapters were trained on (as ``fit`` does)."""
    expected = (recorded.get("base") or {}).get("fingerprint")
    if expected is None:
        return
    found = base_fingerprint(base)
    if found != expected:
        message = (
            f"this adapter-only checkpoint was trained on other base weights than {path} "
            f"holds (fingerprint {found[:12]}, the checkpoint needs {expected[:12]})"
        )
        raise ValueError(message)


def export_peft_adapter(
    state: Mapping[str, torch.Tensor],
    arguments: Mapping[str, Any],
    hf_name: Callable[[str], tuple[str, torch.Tensor | None] | None],
    output_dir: str | Path,
    source: str | Path,
) -> Path:
    """Write the adapters of ``state`` as a PEFT LoRA adapter folder (see the module).

    :param hf_name: the Hugging Face name a plugtrain weight exports to, with the order of its
        rows (``None``: unchanged), or ``None`` when it is not exported row by row.
    :raises ValueError: a layer whose weight is transformed on export (fused or transposed):
        its adapter has no PEFT equivalent; export it folded (``--tgt-fmt hf``).
    """
    from safetensors.torch import save_file

    recorded = _recorded(Path(source))
    adapters = adapters_in(state, arguments, recorded)
    if not adapters:
        raise ValueError(f"{source}: holds no LoRA adapters (no '*.lora_A' tensors)")
    tensors: dict[str, torch.Tensor] = {}
    ranks: dict[str, int] = {}
    alphas: dict[str, float] = {}
    for layer, adapter in adapters.items():
        found = hf_name(layer + ".weight")
        if found is None:
            message = (
                f"{layer}: its weight is transformed on export to Hugging Face (fused or "
                "reshaped), so its adapter has no PEFT form; export with --tgt-fmt hf (folded)"
            )
            raise ValueError(message)
        target, rows = found
        module = target.removesuffix(".weight")
        prefix = f"base_model.model.{module}"
        if adapter["kind"] == "embedding":
            names = (f"{prefix}.lora_embedding_A", f"{prefix}.lora_embedding_B")
        else:
            names = (f"{prefix}.lora_A.weight", f"{prefix}.lora_B.weight")
        a, b = adapter["A"], adapter["B"]
        if rows is not None:  # the weight's rows are reordered on export: B's with them
            if adapter["kind"] == "embedding":
                a = a[:, rows]
            else:
                b = b[rows]
        tensors[names[0]] = a.contiguous().clone()
        tensors[names[1]] = b.contiguous().clone()
        ranks[module] = int(adapter["r"])
        alphas[module] = float(adapter["alpha"])
    r = max(set(ranks.values()), key=list(ranks.values()).count)
    alpha = max(set(alphas.values()), key=list(alphas.values()).count)
    configs = lora_configs(arguments["lora_params"]) if "lora_params" in arguments else []
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": (recorded.get("base") or {}).get("path"),
        "r": r,
        "lora_alpha": alpha,
        "lora_dropout": configs[0].dropout if configs else 0.0,
        "fan_in_fan_out": False,
        "bias": "none",
        "target_modules": sorted(ranks),
        "rank_pattern": {m: v for m, v in ranks.items() if v != r},
        "alpha_pattern": {m: v for m, v in alphas.items() if v != alpha},
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
    }
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=False)
    save_file(tensors, str(output / "adapter_model.safetensors"), metadata={"format": "pt"})
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    (output / "adapter_config.json").write_text(text, encoding="utf-8")
    return output
