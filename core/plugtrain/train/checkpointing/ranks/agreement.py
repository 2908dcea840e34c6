"""Every process resumes from the checkpoint rank 0 picked, or the run stops before step 1.

With ``autoload_last_checkpoint``, rank 0 looks for the newest sound checkpoint and every other
rank loads the checkpoint of that step from its own checkpoint folder (a per-node
``model_dir`` must hold it too). Then the ranks compare what they loaded (one reduction): a rank
that could not load it, or loaded another step, is an error on every rank naming each rank's
file and step, raised before any step runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from plugtrain.errors import TrainingError

__all__ = ["AgreeingTrainer", "disagreement", "restore_agreed"]


class _Reducing(Protocol):
    """The strategy's collective: each key summed over the processes."""

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """``sums`` summed over every process."""


class AgreeingTrainer(Protocol):
    """What the agreement reads of the trainer: its strategy, checkpoint paths, step loaded."""

    @property
    def strategy(self) -> _Reducing:
        """Its ``rank``, ``world_size`` (read where present) and ``reduce_sums``."""

    @property
    def loaded_step(self) -> int | None:
        """The step stored in the checkpoint loaded last."""

    def checkpoint_path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is."""


_NOTHING = -1.0


def restore_agreed(
    trainer: AgreeingTrainer, find_and_load: Callable[[], Path | None], load: Callable[[Path], None]
) -> Path | None:
    """Restore on every process the checkpoint rank 0 finds; the path this process loaded.

    :param find_and_load: loads the newest sound checkpoint (rank 0 only); its path or ``None``.
    :param load: loads one checkpoint path.
    :raises TrainingError: the processes did not all load the checkpoint of rank 0's step.
    """
    strategy = trainer.strategy
    rank = int(getattr(strategy, "rank", 0))
    path: Path | None = None
    problem = ""
    if rank == 0:
        try:
            path = find_and_load()
        except Exception as exc:  # noqa: BLE001 (any failure must reach the comparison, or the others wait on it)
            problem = f"{type(exc).__name__}: {exc}"
    mine = _step_loaded(trainer) if path is not None and not problem else _NOTHING
    picked = strategy.reduce_sums({"step": mine if rank == 0 else 0.0})["step"]
    if rank != 0 and picked != _NOTHING:
        path = trainer.checkpoint_path(int(picked))
        try:
            load(path)
        except Exception as exc:  # noqa: BLE001 (as above)
            problem = f"{type(exc).__name__}: {exc}"
    loaded = _step_loaded(trainer) if path is not None and not problem else _NOTHING
    sums: dict[str, float] = {}
    for other in range(int(getattr(strategy, "world_size", 1))):
        sums[f"step/{other}"] = loaded if other == rank else 0.0
        sums[f"failed/{other}"] = 1.0 if other == rank and problem else 0.0
    every = strategy.reduce_sums(sums)
    report = disagreement(every, picked, lambda step: str(trainer.checkpoint_path(step).name))
    if report is not None:
        here = f" (this is rank {rank}" + (f", {path}: {problem})" if problem else ")")
        raise TrainingError(report + here)
    return path


def _step_loaded(trainer: AgreeingTrainer) -> float:
    """The step of the checkpoint this process just loaded (``load_checkpoint`` sets it)."""
    step = trainer.loaded_step
    assert step is not None, "loading a checkpoint sets trainer.loaded_step"
    return float(step)


def disagreement(
    every: Mapping[str, float], picked: float, name_of: Callable[[int], str]
) -> str | None:
    """Why the reduced ``step/<rank>`` and ``failed/<rank>`` entries disagree, or ``None``.

    :param picked: rank 0's step (-1: none).
    :param name_of: the checkpoint file name of a step.
    """
    ranks = sorted(int(key.split("/")[1]) for key in every if key.startswith("step/"))
    lines = []
    agreed = True
    for rank in ranks:
        step = every[f"step/{rank}"]
        if every[f"failed/{rank}"] > 0:
            agreed = False
            wanted = "a checkpoint" if picked == _NOTHING else name_of(int(picked))
            lines.append(f"rank {rank}: could not load {wanted} (step {int(picked)})")
        elif step == _NOTHING:
            agreed = agreed and picked == _NOTHING
            lines.append(f"rank {rank}: no checkpoint (step 0)")
        else:
            agreed = agreed and step == picked
            lines.append(f"rank {rank}: {name_of(int(step))} (step {int(step)})")
    if agreed:
        return None
    return (
        "the processes did not resume from the same checkpoint, so no step was run: "
        + "; ".join(lines)
    )
