"""Per-tensor reductions and scalings over a flat buffer, one kernel per run of equal sizes.

In a flat layout (:class:`~plugtrain_optimizers._blocks.FlatLayout`) a group's tensors lie back
to back in one buffer. A run of consecutive tensors of the same size is then one
``(count, size)`` matrix: its per-tensor norms are one row reduction and its per-tensor scaling
one broadcast product, instead of a kernel per tensor (measured on 400 tensors of 100x100, one
thread: norms 3.2 ms against 8.1 ms for ``torch._foreach_norm``, scaling 3.2 ms against 7.2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["Run", "run_norms", "same_size_runs", "scale_runs"]

Run = tuple[int, int, int]
"""``(offset, count, size)``: ``count`` tensors of ``size`` elements from ``offset`` on."""


def same_size_runs(tensors: Sequence[torch.Tensor]) -> list[Run]:
    """Runs of consecutive equal-sized ``tensors``, assuming they lie back to back in order."""
    runs: list[Run] = []
    offset = 0
    for t in tensors:
        size = t.numel()
        if runs and runs[-1][2] == size:
            start, count, _ = runs[-1]
            runs[-1] = (start, count + 1, size)
        else:
            runs.append((offset, 1, size))
        offset += size
    return runs


def _matrix(buffer: torch.Tensor, run: Run) -> torch.Tensor:
    offset, count, size = run
    return buffer[offset : offset + count * size].view(count, size)


def run_norms(buffer: torch.Tensor, runs: Sequence[Run]) -> list[float]:
    """The Euclidean norm of each tensor of ``runs`` in ``buffer``, in at least float32."""
    dtype = torch.float64 if buffer.dtype == torch.float64 else torch.float32
    norms = [
        torch.linalg.vector_norm(_matrix(buffer, run), dim=1, dtype=dtype) for run in runs if run[2]
    ]
    values = torch.cat(norms).tolist() if norms else []
    it = iter(values)
    return [next(it) if run[2] else 0.0 for run in runs for _ in range(run[1])]


def scale_runs(buffer: torch.Tensor, runs: Sequence[Run], scales: Sequence[float]) -> None:
    """Multiply each tensor of ``runs`` in ``buffer`` by its entry of ``scales``."""
    values = torch.tensor(scales, dtype=buffer.dtype, device=buffer.device)
    first = 0
    for run in runs:
        count = run[1]
        if run[2]:
            _matrix(buffer, run).mul_(values[first : first + count].unsqueeze(1))
        first += count
