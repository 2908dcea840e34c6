"""``plugtrain checkpoint relayout`` and ``export``: the other layout, and weights for elsewhere.

- :func:`relayout_checkpoint`: a single-file checkpoint into a DCP folder or back, everything
  kept bit for bit (model, optimizer, schedulers, step, RNG, data position, callbacks,
  sparsity, metadata). A DCP checkpoint written by N processes becomes one file with full
  tensors; a file becomes a DCP folder that any number of processes loads (resharded).
- :func:`export_weights`: the model's weights only, as a plain ``state_dict`` file (``torch.load``
  gives a ``{name: tensor}`` mapping) or as safetensors (needs the ``safetensors`` package).

Both write atomically and run in one process, without a process group.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from plugtrain.errors import CheckpointError, MissingDependencyError
from plugtrain.train.checkpointing.storage import archive
from plugtrain.train.checkpointing.storage.dcp import (
    REST_FILE,
    DCPCheckpointer,
    join_state,
    single_process_quiet,
    verify_folder,
)

__all__ = ["export_weights", "load_any", "relayout_checkpoint"]


def is_dcp(path: Path) -> bool:
    """Whether ``path`` is a DCP checkpoint folder (else a single file)."""
    return path.is_dir()


def load_any(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The whole state of a single-file checkpoint or of a DCP folder, with full tensors."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file or DCP folder")
    if not is_dcp(path):
        return archive.load_checkpoint(path)
    verify_folder(path)
    rest = torch.load(path / REST_FILE, map_location="cpu", weights_only=True)
    with tempfile.TemporaryDirectory(prefix=".plugtrain-convert-") as scratch:
        whole = Path(scratch) / "tensors.pt"
        with single_process_quiet():
            dcp_to_torch_save(path, whole)
        tensors = torch.load(whole, map_location="cpu", weights_only=True)
    return join_state(tensors, rest)


def relayout_checkpoint(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Write ``source`` (a file or a DCP folder) in the other layout at ``target``.

    :raises CheckpointError: ``target`` exists, or ``source`` cannot be read.
    """
    source, target = Path(source), Path(target)
    if target.exists():
        raise CheckpointError(f"{target}: exists already; give a new path")
    state = load_any(source)
    if is_dcp(source):
        return archive.save_checkpoint(target, state)
    target.parent.mkdir(parents=True, exist_ok=True)
    writer = DCPCheckpointer(target.parent, target.name, lambda _: {})
    return writer.save(int(state["global_step"]), state)


def export_weights(
    source: str | os.PathLike[str], target: str | os.PathLike[str], fmt: str | None = None
) -> Path:
    """Write the model weights of ``source`` to ``target``: ``torch`` or ``safetensors``.

    :param fmt: ``None``: safetensors when ``target`` ends in ``.safetensors``, else torch.
    :raises MissingDependencyError: safetensors asked for but not installed.
    """
    target = Path(target)
    fmt = fmt or ("safetensors" if target.suffix == ".safetensors" else "torch")
    if target.exists():
        raise CheckpointError(f"{target}: exists already; give a new path")
    weights = {
        name: value.detach().contiguous().clone()  # no storage shared between names (ties)
        for name, value in load_any(source)["model"].items()
    }
    if fmt == "torch":
        return archive.save_checkpoint(target, weights)
    try:
        from safetensors.torch import save_file
    except ImportError as exc:
        message = "export to safetensors needs the safetensors package: pip install safetensors"
        raise MissingDependencyError(message) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial"
    save_file(weights, str(partial), metadata={"format": "pt"})
    os.chmod(partial, _umask_mode())  # safetensors creates its files 0600
    os.replace(partial, target)
    return target


def _umask_mode() -> int:
    """``0666`` less the process's umask: the mode ``open()`` gives a new file (and ``.pt``)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
