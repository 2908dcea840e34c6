"""A LoRA fit under bfloat16 autocast holds its frozen Linear weights in bfloat16, bit-exactly.

The same fit from a bfloat16 Hugging Face folder, with the base held in bfloat16 and with
``PLUGTRAIN_BF16_BASE=0`` (float32, as the model is built), gives the same losses, adapters,
checkpoint values (the held weights saved in bfloat16), folded and PEFT exports, fingerprint,
resume and validation.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from support.decoders import TINY_LLAMA_KEYS
from torch import nn

import plugtrain
from plugtrain.conversion import build_for_loading, export_hf, open_checkpoint, read_checkpoint
from plugtrain.conversion.engine import hf_weight_names
from plugtrain.conversion.meta_build import bfloat16_names, fill_pending, hold_in_bfloat16
from plugtrain.conversion.meta_build.bfloat16 import BUILT_AS, allow_bfloat16
from plugtrain.discovery.loading import get_registry
from plugtrain.train.checkpointing.state import trainer_state
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import apply_lora, is_adapter
from plugtrain_models.lora.bfloat16_base import allow_bfloat16_base, bfloat16_base_weights
from plugtrain_models.lora.callback import Lora
from plugtrain_models.lora.config import LoraConfig

KEYS = {**TINY_LLAMA_KEYS, "share_embedding_weights": False}
LORA = {"r": 2, "alpha": 4, "dropout": 0.1, "target_modules": ["o_proj", "down_proj"]}
"""q, k and v stay plain (their joined matmul runs) and so do the up/gate projections and
the untied head: all frozen and held in bfloat16 beside the adapted layers."""


class _Losses:
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.losses.append(metrics["loss"])


def _loader() -> torch.utils.data.DataLoader[Any]:
    tokens = torch.randint(0, 96, (8, 33), generator=torch.Generator().manual_seed(11))
    rows = [
        {"input_ids": t[:-1], "labels": t[1:], "attention_mask": torch.ones(32, dtype=torch.long)}
        for t in tokens
    ]
    return torch.utils.data.DataLoader(rows, batch_size=2)  # 64 tokens: q, k, v joined


def _trainer(
    model_dir: Path, steps: int, losses: _Losses | None = None, adapter_only: bool = False
) -> plugtrain.Trainer:
    torch.manual_seed(5)
    return plugtrain.Trainer(
        device="CPU",
        model_dir=model_dir,
        model=lambda: build_for_loading(lambda: build_decoder("llama", KEYS)),
        optimizer={"AdamW": {"lr": 0.01}},
        loop={"max_steps": steps},
        checkpoint={"steps": 2},
        precision={"fp16_type": "bfloat16"},
        logging={"log_steps": 1},
        callbacks=[
            Lora(lora_params=LORA, adapter_only_checkpoints=adapter_only),
            *([losses] if losses else []),
        ],
        seed=3,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bfloat16 folder and a 3-step fit from it each way (whole checkpoints at 2 and 3)."""
    root = tmp_path_factory.mktemp("bf16_base")
    torch.manual_seed(0)
    state = {n: t.to(torch.bfloat16) for n, t in build_decoder("llama", KEYS).state_dict().items()}
    folder = export_hf(state, "llama", KEYS, root / "hf")
    found: dict[str, Any] = {"folder": folder, "root": root}
    with pytest.MonkeyPatch.context() as patch:
        adopted: list[int] = []
        original = trainer_state.adopt
        patch.setattr(trainer_state, "adopt", lambda *a: adopted.append(original(*a)) or 0)
        for held in (False, True):
            patch.setenv("PLUGTRAIN_BF16_BASE", "1" if held else "0")
            losses = _Losses()
            trainer = _trainer(root / str(held), 3, losses)
            trainer.fit(_loader(), ckpt_path=str(folder))
            found[held] = {"trainer": trainer, "losses": losses.losses, "adopted": adopted.pop()}
    return found


def _checkpoint(trainer: plugtrain.Trainer, step: int) -> dict[str, Any]:
    loaded: dict[str, Any] = torch.load(trainer.checkpoint_path(step), weights_only=True)
    return loaded


@pytest.mark.slow
def test_the_base_is_held_in_bfloat16_adopted_as_read_and_trains_the_same(
    runs: dict[str, Any],
) -> None:
    held, built = runs[True]["trainer"].unwrapped_model, runs[False]["trainer"].unwrapped_model
    types = {n: p.dtype for n, p in held.named_parameters()}
    bf16 = {n for n, t in types.items() if t == torch.bfloat16}
    linear = {f"{n}.weight" for n, m in built.named_modules() if isinstance(m, nn.Linear)}
    assert bf16 == linear  # every Linear weight (the adapters are not the layers' weights) ...
    assert "model.lm_head.weight" in bf16
    assert not any("embedding" in n or "norm" in n or is_adapter(n) for n in bf16)  # ... only
    assert {p.dtype for p in built.parameters()} == {torch.float32}
    # every tensor read is kept as read, the bfloat16 ones too (a copy would not be adopted)
    assert runs[True]["adopted"] == runs[False]["adopted"] > len(bf16)
    assert runs[True]["losses"] == runs[False]["losses"]
    assert len(runs[True]["losses"]) == 3
    assert all(map(math.isfinite, runs[True]["losses"]))
    ours, theirs = held.state_dict(), built.state_dict()
    for name, tensor in theirs.items():
        assert ours[name].dtype == (torch.bfloat16 if name in bf16 else tensor.dtype), name
        assert torch.equal(ours[name].to(tensor.dtype), tensor), name


@pytest.mark.slow
def test_the_checkpoints_fingerprint_and_resume_are_those_of_the_float32_base(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    held, built = runs[True]["trainer"], runs[False]["trainer"]
    bf16 = bfloat16_names(held.unwrapped_model)
    for step in (2, 3):
        ours, theirs = _checkpoint(held, step), _checkpoint(built, step)
        assert ours["model"].keys() == theirs["model"].keys()
        for name, tensor in theirs["model"].items():  # float32, as the float32 model saves
            assert ours["model"][name].dtype == (torch.bfloat16 if name in bf16 else tensor.dtype)
            assert torch.equal(ours["model"][name].to(tensor.dtype), tensor), name
        assert ours["callbacks"] == theirs["callbacks"]  # the base's fingerprint among them
        assert ours["optimizer"]["state"].keys() == theirs["optimizer"]["state"].keys()
        for index, moments in theirs["optimizer"]["state"].items():
            for key, value in moments.items():
                assert torch.equal(ours["optimizer"]["state"][index][key], value), (index, key)
    fingerprint = next(e["state"] for e in _checkpoint(held, 3)["callbacks"] if e["name"] == "Lora")
    assert len(fingerprint["base"]["fingerprint"]) == 64
    expected = held.unwrapped_model.state_dict()
    for source in (held, built):  # bfloat16 values, saved in bfloat16 or in float32
        model_dir = tmp_path / str(source is held)
        model_dir.mkdir()
        (model_dir / "checkpoint_2.mdl").write_bytes(source.checkpoint_path(2).read_bytes())
        resumed = _trainer(model_dir, 3)
        resumed.fit(_loader())  # held in bfloat16 again
        assert resumed.loaded_step == 2
        for name, tensor in resumed.unwrapped_model.state_dict().items():
            assert tensor.dtype == expected[name].dtype, name
            assert torch.equal(tensor, expected[name]), name


@pytest.mark.slow
def test_the_folded_and_peft_exports_are_those_of_the_float32_base(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    for base in ("recorded", "gone"):  # the base's type (bfloat16), or the checkpoint's
        exports = []
        for held in (True, False):
            checkpoint = _checkpoint(runs[held]["trainer"], 3)
            if base == "gone":
                for entry in checkpoint["callbacks"]:
                    if entry and entry["name"] == "Lora":
                        entry["state"]["base"]["path"] = None
            source = tmp_path / f"{base}_{held}.mdl"
            torch.save(checkpoint, source)
            state = checkpoint["model"]
            folded, keys = Lora.fold_for_export(state, {"lora_params": LORA}, "llama", KEYS, source)
            names = hf_weight_names(state, "llama", KEYS)
            folder = tmp_path / f"{base}_{held}"
            Lora.export_adapter(state, {"lora_params": LORA}, names.get, folder, source)
            exports.append((folded, keys, (folder / "adapter_model.safetensors").read_bytes()))
        (ours, our_keys, our_adapter), (theirs, their_keys, their_adapter) = exports
        assert our_keys == their_keys
        assert our_adapter == their_adapter
        assert ours.keys() == theirs.keys()
        dtype = torch.bfloat16 if base == "recorded" else torch.float32
        for name, tensor in theirs.items():
            assert ours[name].dtype == tensor.dtype == dtype, name
            assert torch.equal(ours[name], tensor), name


@pytest.mark.slow
def test_an_adapter_only_fit_resumes_reading_the_folder_in_bfloat16_again(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    _trainer(tmp_path, 2, adapter_only=True).fit(_loader(), ckpt_path=str(runs["folder"]))
    resumed = _trainer(tmp_path, 3, adapter_only=True)
    resumed.fit(_loader())
    assert resumed.loaded_step == 2
    straight = runs[False]["trainer"].unwrapped_model.state_dict()  # float32, whole checkpoints
    bf16 = set(bfloat16_names(resumed.unwrapped_model))
    for name, tensor in resumed.unwrapped_model.state_dict().items():
        assert tensor.dtype == (torch.bfloat16 if name in bf16 else torch.float32), name
        assert torch.equal(tensor.float(), straight[name]), name
    assert len(bf16) > 10


@pytest.mark.slow
def test_validating_a_checkpoint_gives_the_float32_bases_metrics(
    runs: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = str(runs[True]["trainer"].checkpoint_path(3))
    metrics = []
    for held in ("0", "1"):
        monkeypatch.setenv("PLUGTRAIN_BF16_BASE", held)
        trainer = _trainer(tmp_path / held, 3)
        metrics.append(trainer.validate(_loader(), ckpt_path=checkpoint))
        kinds = {p.dtype for p in trainer.unwrapped_model.parameters()}
        assert torch.bfloat16 in kinds if held == "1" else kinds == {torch.float32}
    assert metrics[0] == metrics[1]
    assert metrics[0]["loss"] > 0


def test_a_bfloat16_weight_computes_under_autocast_as_its_float32_copy_bit_for_bit() -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 32, generator=generator).to(torch.bfloat16)
    hidden = torch.randn(4, 9, 32, generator=generator)
    results = []
    for held in (weight, weight.float()):  # the bfloat16 values, held both ways
        x = hidden.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = nn.functional.linear(x, held)
            joined = nn.functional.linear(x, torch.cat([held, held[:8]]))
        (out.float().square().sum() + joined.float().sum()).backward()
        results.append((out, joined, x.grad))
    for ours, theirs in zip(*results, strict=True):
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs)


def _lora_model() -> nn.Module:
    torch.manual_seed(0)
    model = build_decoder("llama", KEYS)
    apply_lora(model, [LoraConfig(r=2, alpha=4.0, merge_weights=True)])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    return model


def test_the_marked_weights_follow_the_values_a_load_brings() -> None:
    model = _lora_model()
    weights = bfloat16_base_weights(model)
    assert allow_bfloat16(weights) == len(weights) > 0
    names = bfloat16_names(model)
    assert not any("embedding" in n or "norm" in n or is_adapter(n) for n in names)
    state = {n: t.clone() for n, t in model.state_dict().items()}
    rounded = {n: t.to(torch.bfloat16) if n in names else t for n, t in state.items()}
    assert hold_in_bfloat16(model, rounded) == len(weights)  # bfloat16 values: bfloat16
    model.load_state_dict(rounded)
    widened = {n: t.float() for n, t in rounded.items()}
    assert hold_in_bfloat16(model, widened) == len(weights)  # float32 of bfloat16 values too
    assert hold_in_bfloat16(model, state) == 0  # float32 values (drawn): float32 again
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model.load_state_dict(state)
    for name in names:
        assert torch.equal(model.state_dict()[name], state[name])


def test_a_weight_held_in_bfloat16_merges_as_its_float32_copy() -> None:
    ours, theirs = _lora_model(), _lora_model()
    assert allow_bfloat16(bfloat16_base_weights(ours)) > 0
    rounded = {
        n: t.to(torch.bfloat16) if n in bfloat16_names(ours) else t
        for n, t in theirs.state_dict().items()
    }
    hold_in_bfloat16(ours, rounded)
    ours.load_state_dict(rounded)
    theirs.load_state_dict(rounded)  # float32, holding the same values
    ours.eval()  # merge_weights: W + B A * scaling, in float32 both ways
    theirs.eval()
    for (name, mine), other in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert mine.dtype == other.dtype, name
        assert torch.equal(mine, other), name
    ours.train()  # the weights held in bfloat16 again, as they were
    held = {p.dtype for p in ours.parameters() if hasattr(p, BUILT_AS)}
    assert held == {torch.bfloat16}


@pytest.mark.parametrize(
    ("dtype", "world_size", "sharded", "switch", "marked"),
    [
        (torch.bfloat16, 1, False, "1", True),
        (None, 1, False, "1", False),  # full precision, or CSX (its compiler casts)
        (torch.float16, 1, False, "1", False),
        (torch.bfloat16, 2, False, "1", False),  # DDP
        (torch.bfloat16, 1, True, "1", False),  # FSDP2
        (torch.bfloat16, 1, False, "0", False),  # PLUGTRAIN_BF16_BASE=0
    ],
)
def test_only_a_one_process_fit_under_bfloat16_autocast_marks_its_base(
    monkeypatch: pytest.MonkeyPatch,
    dtype: torch.dtype | None,
    world_size: int,
    sharded: bool,
    switch: str,
    marked: bool,
) -> None:
    monkeypatch.setenv("PLUGTRAIN_BF16_BASE", switch)
    model = _lora_model()
    strategy = SimpleNamespace(world_size=world_size, sharded_parameters=sharded)
    trainer = SimpleNamespace(precision=SimpleNamespace(dtype=dtype), strategy=strategy)
    expected = 7 * KEYS["num_hidden_layers"] + 1  # the projections and the untied head
    assert allow_bfloat16_base(trainer, model) == (expected if marked else 0)
    assert len(bfloat16_names(model)) == (expected if marked else 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_a_folder_is_read_in_bfloat16_only_where_it_holds_bfloat16(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    state = {n: t.to(dtype) for n, t in build_decoder("llama", KEYS).state_dict().items()}
    folder = export_hf(state, "llama", KEYS, tmp_path / "hf")
    wanted = dict.fromkeys(state, torch.float32)
    kept = {"model.lm_head.weight", "model.embedding_layer.word_embeddings.weight"}
    read = read_checkpoint(open_checkpoint(folder, get_registry()), dtypes=wanted,
                           bfloat16_kept=kept)  # fmt: skip
    assert kept <= read.owned  # in memory of their own: a model built for loading keeps them
    for name, tensor in read.state.items():
        assert tensor.dtype == (dtype if name in kept else torch.float32), name
        assert torch.equal(tensor.float(), state[name].float()), name


def test_what_a_load_leaves_unfilled_gets_the_initial_values_it_gets_beside_float32() -> None:
    torch.manual_seed(0)
    source = build_decoder("llama", KEYS).state_dict()
    given = {n: t.to(torch.bfloat16) for n, t in source.items() if n != "model.lm_head.weight"}
    filled = []
    for held in (False, True):
        torch.manual_seed(7)
        model = build_for_loading(lambda: build_decoder("llama", KEYS))
        apply_lora(model, [LoraConfig(r=2, target_modules=("o_proj",))])
        if held:
            allow_bfloat16(bfloat16_base_weights(model))
        weights = {**given, **{n: t for n, t in model.state_dict().items() if is_adapter(n)}}
        assert hold_in_bfloat16(model, weights) == (14 if held else 0)
        model.load_state_dict(weights, strict=False)
        fill_pending(model, weights)  # the head: drawn after every other weight's draws
        filled.append(model.state_dict())
    for name, tensor in filled[0].items():
        assert torch.equal(filled[1][name].float(), tensor.float()), name
    assert filled[1]["model.lm_head.weight"].dtype == torch.float32  # not loaded: as built
