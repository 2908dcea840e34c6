"""The one line that says what a fit is about to do, printed before its first step."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from plugtrain.contract.protocols import TrainerView

__all__ = ["SummarizedTrainer", "describe_fit"]


class SummarizedTrainer(TrainerView, Protocol):
    """What :func:`describe_fit` and the default progress logger read of the trainer.

    Of its ``precision``, the ``dtype`` (``None``: float32) and ``scaler`` (loss scaling) when it
    has them.
    """

    @property
    def stream(self) -> object | None:
        """The fit's data stream, whose ``loader`` tells the batch size (read if present)."""


def _count(number: int) -> str:
    """``1.23M``, ``45.6k``, ``812``."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if number >= size:
            return f"{number / size:.3g}{suffix}"
    return str(number)


def _sequence_length(loader: Any) -> int | None:
    """The sequence length a loader declares, if it does (Model Zoo's processors do)."""
    for owner in (loader, getattr(loader, "dataset", None)):
        for name in ("max_sequence_length", "sequence_length"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    return None


def _batch_size(loader: Any) -> int | None:
    """Samples per micro-batch of this process: the loader's, else its batch sampler's."""
    size = getattr(loader, "batch_size", None)
    if isinstance(size, int):
        return size
    sampler = getattr(loader, "batch_sampler", None)
    size = getattr(sampler, "batch_size", None)
    if isinstance(size, int):
        return size
    order = getattr(sampler, "order", None)  # the global sample order's sampler
    size = getattr(order, "batch_size", None)
    return size if isinstance(size, int) else None


def _precision(trainer: SummarizedTrainer) -> str:
    precision = trainer.precision
    dtype = getattr(precision, "dtype", None)
    if dtype is None:
        return "float32"
    name = str(dtype).removeprefix("torch.")
    scaled = " with loss scaling" if getattr(precision, "scaler", None) is not None else ""
    return f"{name} autocast{scaled}"


def describe_fit(trainer: SummarizedTrainer, loader: Any) -> str:
    """The line, e.g. ``fit: GPT 1.2M parameters; batch 8 x 128 per process, global 32.

    (2 processes x 2 micro-batches); float32; steps 0 -> 600; writes runs/gpt``: the model's
    size, the batch (and sequence length when the loader declares it), the global batch, the
    precision in effect, the steps and where the run writes.
    """
    model = trainer.unwrapped_model
    parameters = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    processes = int(getattr(trainer.backend, "world_size", 1) or 1)
    accum = trainer.loop.grad_accum_steps if trainer.loop else 1
    batch = _batch_size(loader)
    parts = [f"{type(model).__name__} {_count(parameters)} parameters"]
    if trainable != parameters:  # some frozen (LoRA, a frozen backbone)
        parts[0] += f" ({_count(trainable)} train)"
    if isinstance(batch, int):
        length = _sequence_length(loader)
        shape = f"{batch} x {length}" if length else str(batch)
        split = []
        if processes > 1:
            split.append(f"{processes} processes")
        if accum > 1:
            split.append(f"{accum} micro-batches")
        global_batch = (
            f", global {batch * processes * accum} ({' x '.join(split)})" if split else ""
        )
        parts.append(f"batch {shape} per process{global_batch}")
    elif processes > 1:
        parts.append(f"{processes} processes")
    parts.append(_precision(trainer))
    parts.append(f"steps {trainer.global_step} -> {trainer.target_step}")
    where = Path(trainer.model_dir)
    if Path(trainer.checkpoint_dir) != where:
        parts.append(f"writes {where} (checkpoints in {trainer.checkpoint_dir})")
    else:
        parts.append(f"writes {where}")
    return "fit: " + "; ".join(parts)
