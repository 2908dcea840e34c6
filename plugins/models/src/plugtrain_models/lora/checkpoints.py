"""LoRA checkpoints: a base checkpoint loaded as it is, adapter-only files, the base's fingerprint.

- A checkpoint without adapters (plugtrain's, or a Hugging Face folder) is a *base*: its weights
  load, the model's fresh adapters are added to it, and what belongs to another run (optimizer,
  schedulers, step, data position, callbacks) is left out: the fine-tune starts at step 0.
- An adapter-only checkpoint holds the adapters and the optimizer state of the adapters, plus a
  reference to the base weights it needs (their file, if any, and a fingerprint: SHA-256 over
  each base tensor's name, shape and bytes, floating tensors as float32, so that a bfloat16
  file and the float32 model it was loaded into give the same one). Loading one reads the base
  again (or keeps the model's own, for a base that was built rather than loaded) and refuses a
  base whose fingerprint differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from plugtrain_models.lora.apply import is_adapter

__all__ = ["RUN_PARTS", "base_fingerprint", "full", "read_base_weights"]

RUN_PARTS = ("optimizer", "schedulers", "grad_scaler", "global_step", "dataloader", "callbacks")
"""The parts of a checkpoint that belong to the run that wrote it, not to its weights."""


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a sharded (DTensor) parameter, else the tensor (a collective)."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def base_fingerprint(state: Mapping[str, Any]) -> str:
    """SHA-256 over the base tensors of a model state (adapters and non-tensors left out)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name]
        if is_adapter(name) or not isinstance(tensor, torch.Tensor):
            continue
        whole = full(tensor).detach().cpu()
        kind = "float" if whole.is_floating_point() else str(whole.dtype)
        if whole.is_floating_point():  # one form for a bf16 file and the float32 model it fills
            whole = whole.to(torch.float32)
        digest.update(f"{name}:{tuple(whole.shape)}:{kind}".encode())
        digest.update(memoryview(whole.contiguous().reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


def _is_hf(path: Path) -> bool:
    if path.is_dir():
        return (path / "config.json").is_file()
    return path.suffix == ".safetensors" or path.name.endswith(".index.json")


def read_base_weights(path: str, model: nn.Module | str) -> dict[str, torch.Tensor]:
    """The model state of the base checkpoint at ``path`` (plugtrain's file, or Hugging Face's).

    :param model: the model, or its checkpoint converter's key (to read a Hugging Face folder).

    :raises FileNotFoundError: naming the path the adapter-only checkpoint refers to.
    """
    from plugtrain.conversion import hf_to_plugtrain

    if not Path(path).exists():
        message = f"the base weights {path} that this adapter-only checkpoint needs are gone"
        raise FileNotFoundError(message)
    if _is_hf(Path(path)):
        family = model if isinstance(model, str) else getattr(model, "checkpoint_converter", None)
        converted = hf_to_plugtrain(path, family)
        return dict(converted.state)
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    weights = state.get("model", state)
    return dict(weights)
