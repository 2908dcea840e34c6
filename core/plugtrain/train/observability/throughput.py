"""Throughput and model FLOPs utilisation (MFU), in each logged training record.

Tokens: a model may declare ``num_tokens(batch) -> int`` (since plugin API 1.1); otherwise a
mapping batch with an ``input_ids`` tensor counts its elements; other batches count none. The
Trainer's data stream counts them as it hands batches out (:func:`token_counter`). Padding and
prompt tokens count there too; the tokens the loss is taken over (``loss_mask``, else the
``labels`` that are not -100: :func:`loss_tokens_in`) are reported beside them.

MFU above 1 means the peak FLOP/s is wrong (a stale probe of a busy CPU): it is not reported,
and a warning says so once.

FLOPs (on CPU and CUDA devices): counted once, by :class:`torch.utils.flop_counter.FlopCounterMode`
over the forward and backward passes of one optimizer step (all its micro-batches), then scaled
by the tokens (else the samples) of later windows. A fit from step 0 counts its second step (the
first is often a warm-up or a compilation); a resumed fit counts its first, so that from step 2
on every record of a run carries the same keys whether or not it was interrupted. That step
runs eagerly (``torch.compiler.set_stance("force_eager")``: compiled kernels escape the
counter). With activation checkpointing, the recomputed forward passes are counted too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

__all__ = ["MeteredTrainer", "Throughput", "loss_tokens_in", "token_counter", "tokens_in"]

log = logging.getLogger("plugtrain")


class _Counts(Protocol):
    """A data stream's count of what it handed out (:class:`plugtrain.train.data.DataStream`)."""

    @property
    def tokens(self) -> int: ...

    @property
    def samples(self) -> int: ...


class MeteredTrainer(Protocol):
    """What :class:`Throughput` reads of the trainer it is a callback of.

    A :class:`plugtrain.train.trainer.Trainer`, or a stand-in measuring the callback alone.
    """

    @property
    def device(self) -> torch.device:
        """FLOPs are counted on a CPU or CUDA device only."""

    @property
    def global_step(self) -> int:
        """The step the fit starts from (it decides which step has its FLOPs counted)."""

    @property
    def stream(self) -> _Counts | None:
        """The data stream of the fit (``None``: nothing handed out yet)."""

    @property
    def precision(self) -> object:
        """Its ``dtype``, if it has one, is the dtype of the peak FLOP/s."""

    @property
    def backend(self) -> object:
        """Its ``peak_flops(dtype)``, if it has one, gives the peak FLOP/s."""


def tokens_in(batch: Any) -> int:
    """Tokens of a batch without a model's count: the elements of its ``input_ids`` tensor."""
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        if isinstance(ids, torch.Tensor):
            return ids.numel()
    return 0


def loss_tokens_in(batch: Any) -> int:
    """Tokens of a batch the loss is taken over: ``loss_mask``'s, else ``labels`` not -100."""
    if not isinstance(batch, Mapping):
        return 0
    mask = batch.get("loss_mask")
    if isinstance(mask, torch.Tensor):
        return int(mask.count_nonzero())
    labels = batch.get("labels")
    if isinstance(labels, torch.Tensor) and labels.dtype not in (torch.float32, torch.float64):
        return int((labels != -100).sum()) if labels.dim() > 1 else 0
    return 0


def token_counter(model: Any) -> Callable[[Any], int]:
    """How the Trainer counts a batch's tokens for ``model``: ``num_tokens``, else tokens_in."""
    declared = getattr(model, "num_tokens", None)
    return declared if callable(declared) else tokens_in


class Throughput:
    """Adds tokens/s, samples/s, FLOP/s and MFU to each logged training record.

    The metrics: ``device/tokens_per_sec`` (every position, padding included),
    ``device/loss_tokens_per_sec`` (the positions the loss is taken over),
    ``device/samples_per_sec``, ``device/flops_per_sec`` and ``device/mfu`` (a fraction of the
    device's peak FLOP/s, never above 1).
    Rates are this process's (one device), over the window since the previous record, without
    the time spent in evaluations. On by default for models that report tokens (``Throughput:
    null`` removes it); listed in ``callbacks``, it reports samples for any model.

    :param peak_flops: the device's peak FLOP/s; ``None``: what the backend reports
        (``peak_flops(dtype)``), else the known-GPU table or, on a CPU, a matmul probe (cached).
    :param mfu: count the model's FLOPs and report ``device/flops_per_sec`` and ``device/mfu``.
    :param only_with_tokens: report nothing for a fit whose batches hold no tokens (the default
        instance's setting).
    """

    def __init__(
        self, peak_flops: float | None = None, mfu: bool = True, *, only_with_tokens: bool = False
    ) -> None:
        self.peak_flops = peak_flops
        self.mfu = mfu
        self.only_with_tokens = only_with_tokens
        self.flops_per_step: int | None = None
        """The model FLOPs (forward and backward) of the counted optimizer step."""
        self.step_tokens = self.step_samples = 0
        """The tokens and samples of the counted step."""
        self._active = True
        self._count_step = -1
        self._counter: Any = None
        self._eager: Any = None
        self._at_count = (0, 0)
        self._last = 0.0
        self._last_units = (0, 0)
        self._last_loss_units = 0
        self._paused = 0.0
        self._said_above_peak = False

    def on_fit_start(self, trainer: MeteredTrainer) -> None:
        """Start the clock and choose the step whose FLOPs are counted.

        Step 2, as an uninterrupted run counts it. A resumed fit keeps the count its checkpoint
        holds (the callback's state), so it counts no step an uninterrupted run does not (the
        counted step runs eagerly, which may change its rounding); a checkpoint without one
        has the first step after it counted. Either way every record from step 2 on carries
        FLOP/s whether or not the run was interrupted.
        """
        counts = self.mfu and trainer.device.type in _COUNTED_DEVICES
        start = trainer.global_step
        if not counts or not self._active:
            self._count_step = -1
        elif start < 2:
            self._count_step = 2
        else:
            self._count_step = -1 if self.flops_per_step is not None else start + 1
        self._last = time.perf_counter()
        self._last_units = _units(trainer)
        self._last_loss_units = _loss_units(trainer)
        self._paused = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The counted step's FLOPs, tokens and samples, and whether the fit reports at all."""
        return {
            "flops_per_step": self.flops_per_step,
            "step_tokens": self.step_tokens,
            "step_samples": self.step_samples,
            "active": self._active,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Keep the count of the run resumed (see :meth:`on_fit_start`)."""
        flops = state.get("flops_per_step")
        self.flops_per_step = int(flops) if flops is not None else None
        self.step_tokens = int(state.get("step_tokens") or 0)
        self.step_samples = int(state.get("step_samples") or 0)
        self._active = bool(state.get("active", True))

    def on_train_step_start(self, trainer: MeteredTrainer, step: int) -> None:
        """At the counted step, start counting FLOPs (and decide whether there are tokens)."""
        if self._counter is not None:  # the counted step was skipped (non-finite loss)
            self._stop_counting(trainer)
        if step != self._count_step or not self._active:
            return
        tokens, samples = _units(trainer)
        if self.only_with_tokens and samples and not tokens:  # batches drawn, none with tokens
            self._active = False
            return
        from torch.utils.flop_counter import FlopCounterMode

        self._at_count = _units(trainer)
        self._eager = torch.compiler.set_stance("force_eager")  # set from here to its exit
        self._counter = FlopCounterMode(display=False)
        self._counter.__enter__()

    def on_before_optimizer_step(self, trainer: MeteredTrainer, optimizer: Any) -> None:
        """Stop counting: the step's forward and backward passes are done."""
        if self._counter is not None:
            self._stop_counting(trainer)

    def on_fit_end(self, trainer: MeteredTrainer) -> None:
        """Stop counting if the counted step never reached its optimizer step."""
        if self._counter is not None:
            self._stop_counting(trainer)

    def _stop_counting(self, trainer: MeteredTrainer) -> None:
        counter, self._counter = self._counter, None
        counter.__exit__(None, None, None)
        self._eager.__exit__(None, None, None)
        self.flops_per_step = int(counter.get_total_flops())
        tokens, samples = _units(trainer)
        self.step_tokens = tokens - self._at_count[0]
        self.step_samples = samples - self._at_count[1]
        if self.only_with_tokens and not self.step_tokens:  # a resumed fit's first batches
            self._active, self.flops_per_step = False, None

    def on_validate_start(self, trainer: MeteredTrainer) -> None:
        """Stop the clock during an evaluation."""
        self._paused = time.perf_counter()

    def on_validate_end(self, trainer: MeteredTrainer, metrics: dict[str, float]) -> None:
        """Restart the clock after an evaluation."""
        if self._paused:
            self._last += time.perf_counter() - self._paused
            self._paused = 0.0

    def on_train_step_end(self, trainer: MeteredTrainer, metrics: dict[str, float]) -> None:
        """Add the window's rates (and MFU once the FLOPs are counted) to ``metrics``."""
        now = time.perf_counter()
        tokens, samples = _units(trainer)
        elapsed = now - self._last
        done_tokens, done_samples = tokens - self._last_units[0], samples - self._last_units[1]
        self._last, self._last_units = now, (tokens, samples)
        loss_tokens = _loss_units(trainer)
        done_loss_tokens = loss_tokens - self._last_loss_units
        self._last_loss_units = loss_tokens
        if elapsed <= 0 or not self._active or (self.only_with_tokens and not done_tokens):
            return
        metrics["device/samples_per_sec"] = done_samples / elapsed
        if done_tokens:
            metrics["device/tokens_per_sec"] = done_tokens / elapsed
        if done_loss_tokens:
            metrics["device/loss_tokens_per_sec"] = done_loss_tokens / elapsed
        flops = self._window_flops(done_tokens, done_samples)
        if flops is None:
            return
        metrics["device/flops_per_sec"] = flops / elapsed
        peak = self._peak(trainer)
        if peak and flops / elapsed <= peak:
            metrics["device/mfu"] = flops / elapsed / peak
        elif peak and not self._said_above_peak:
            self._said_above_peak = True
            log.warning(
                "warning: the model ran at %.3g FLOP/s, above the peak of %.3g FLOP/s taken "
                "for this device: MFU is not reported (give Throughput: {peak_flops: ...})",
                flops / elapsed,
                peak,
            )

    def _window_flops(self, tokens: int, samples: int) -> float | None:
        """The model FLOPs of a window: the counted step's, per token (else per sample)."""
        if self.flops_per_step is None:
            return None
        if self.step_tokens:
            return self.flops_per_step * tokens / self.step_tokens
        if self.step_samples:
            return self.flops_per_step * samples / self.step_samples
        return None

    def _peak(self, trainer: MeteredTrainer) -> float | None:
        if self.peak_flops is None:
            dtype = getattr(trainer.precision, "dtype", None) or torch.float32
            reported = getattr(trainer.backend, "peak_flops", None)
            if callable(reported):
                self.peak_flops = reported(dtype)
            else:
                from plugtrain.train.observability.peak_flops import device_peak_flops

                self.peak_flops = device_peak_flops(trainer.device, dtype)
            self.peak_flops = self.peak_flops or 0.0
        return self.peak_flops


_COUNTED_DEVICES = ("cpu", "cuda")
"""Where FLOPs are counted: a compiling backend's device (CSX) runs no eager ops to count."""


def _loss_units(trainer: MeteredTrainer) -> int:
    """Tokens the loss is taken over that the trainer's data stream has handed out."""
    return int(getattr(trainer.stream, "loss_tokens", 0) or 0)


def _units(trainer: MeteredTrainer) -> tuple[int, int]:
    """Tokens and samples the trainer's data stream has handed out."""
    stream = trainer.stream
    return (stream.tokens, stream.samples) if stream is not None else (0, 0)
