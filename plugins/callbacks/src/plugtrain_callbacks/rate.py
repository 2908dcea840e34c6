"""RateProfiler: samples and steps per second, into the training metrics."""

from __future__ import annotations

import time

from plugtrain.protocols import TrainerView

__all__ = ["RateProfiler"]


class RateProfiler:
    """Adds throughput to each logged training record, for this process.

    ``rate/samples_per_second`` and ``rate/steps_per_second`` since the previous record, and
    ``rate/avg_samples_per_second`` since the fit started. Samples are
    :attr:`plugtrain.protocols.TrainerView.samples_seen` (examples this process trained on).
    """

    def __init__(self) -> None:
        self._start = self._last = 0.0
        self._start_samples = self._last_samples = 0
        self._last_step = 0

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Start the clocks."""
        self._start = self._last = time.perf_counter()
        self._start_samples = self._last_samples = trainer.samples_seen
        self._last_step = trainer.global_step

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Add the rates since the last record and since the start."""
        now = time.perf_counter()
        samples, step = trainer.samples_seen, trainer.global_step
        elapsed = now - self._last
        if elapsed > 0:
            metrics["rate/samples_per_second"] = (samples - self._last_samples) / elapsed
            metrics["rate/steps_per_second"] = (step - self._last_step) / elapsed
        if now > self._start:
            metrics["rate/avg_samples_per_second"] = (samples - self._start_samples) / (
                now - self._start
            )
        self._last, self._last_samples, self._last_step = now, samples, step
