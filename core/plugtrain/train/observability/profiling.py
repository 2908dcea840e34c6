"""The profiler window (``trainer.init.profile``): a Chrome trace of some training steps.

``profile: {start_step, steps, memory}`` runs :mod:`torch.profiler` over the global steps
``start_step`` to ``start_step + steps - 1`` (after one warm-up step when the fit has run one
before) and writes ``model_dir/profile/trace_steps_A-B[_rankR].json``, loadable by Perfetto or
``chrome://tracing``. Each profiled step is annotated ``train_step N``. With ``memory``, the
trace records allocations (``profile_memory``) and, on CUDA, the window's allocator history is
dumped to ``memory_snapshot_steps_A-B[_rankR].pickle`` (https://pytorch.org/memory_viz).
Without ``profile`` nothing is added to the loop.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol

import torch

from plugtrain.config.speed import ProfileSettings

__all__ = ["ProfiledTrainer", "ProfilerWindow", "profiler_callbacks"]

log = logging.getLogger("plugtrain")


class ProfiledTrainer(Protocol):
    """What :class:`ProfilerWindow` reads of the trainer it is a callback of."""

    @property
    def model_dir(self) -> str | os.PathLike[str]:
        """The traces go to its ``profile`` folder."""

    @property
    def device(self) -> torch.device:
        """A CUDA device's kernels and memory are profiled too."""


def profiler_callbacks(settings: ProfileSettings | None) -> list[Any]:
    """The Trainer's extra callbacks for ``settings``: a :class:`ProfilerWindow`, or none."""
    return [] if settings is None else [ProfilerWindow(settings)]


class ProfilerWindow:
    """A callback that profiles the steps of :class:`ProfileSettings` (see the module)."""

    def __init__(self, settings: ProfileSettings) -> None:
        self.settings = settings
        self.trace_path: Path | None = None
        """The trace written last (``None``: none yet)."""
        self._profiler: Any = None
        self._step_mark: Any = None
        self._paths: dict[str, Path] = {}
        self._cuda_memory = False

    @property
    def _last(self) -> int:
        return self.settings.start_step + self.settings.steps - 1

    def _names(self, trainer: ProfiledTrainer) -> dict[str, Path]:
        first, last = self.settings.start_step, self._last
        rank = ""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = f"_rank{torch.distributed.get_rank()}"
        folder = Path(trainer.model_dir) / "profile"
        return {
            "trace": folder / f"trace_steps_{first}-{last}{rank}.json",
            "memory": folder / f"memory_snapshot_steps_{first}-{last}{rank}.pickle",
        }

    def on_train_step_start(self, trainer: ProfiledTrainer, step: int) -> None:
        """Start the profiler before the window (one warm-up step), advance it, stop it after."""
        if self._step_mark is not None:
            self._step_mark.__exit__(None, None, None)
            self._step_mark = None
        start = self.settings.start_step
        if self._profiler is None and start - 1 <= step <= self._last:
            self._start(trainer, warmup=step < start, window=self._last - max(step, start) + 1)
        elif self._profiler is not None:
            self._profiler.step()
        if self._profiler is not None and step > self._last:
            self._stop()
        if self._profiler is not None:
            self._step_mark = torch.profiler.record_function(f"train_step {step}")
            self._step_mark.__enter__()

    def on_fit_end(self, trainer: ProfiledTrainer) -> None:
        """Stop a window the fit ended inside (its trace is written)."""
        if self._step_mark is not None:
            self._step_mark.__exit__(None, None, None)
            self._step_mark = None
        if self._profiler is not None:
            self._stop()

    def _start(self, trainer: ProfiledTrainer, *, warmup: bool, window: int) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        self._paths = self._names(trainer)
        self._paths["trace"].parent.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if trainer.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        memory = self.settings.memory
        self._profiler = profile(
            activities=activities,
            schedule=schedule(wait=0, warmup=int(warmup), active=window, repeat=1),
            on_trace_ready=self._write,
            record_shapes=memory,
            profile_memory=memory,
        )
        self._cuda_memory = memory and trainer.device.type == "cuda"
        if self._cuda_memory:
            torch.cuda.memory._record_memory_history(max_entries=100_000)
        self._profiler.__enter__()

    def _write(self, profiler: Any) -> None:
        path = self._paths["trace"]
        profiler.export_chrome_trace(str(path))
        self.trace_path = path
        log.info("profile: wrote the trace of steps %d-%d to %s", *self._window(), path)
        if self._cuda_memory:
            torch.cuda.memory._dump_snapshot(str(self._paths["memory"]))
            torch.cuda.memory._record_memory_history(enabled=None)
            self._cuda_memory = False
            log.info("profile: wrote the memory snapshot to %s", self._paths["memory"])

    def _window(self) -> tuple[int, int]:
        return self.settings.start_step, self._last

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
