"""The contract every :class:`~plugtrain.train.checkpointing.Checkpointer` must keep.

:func:`check_checkpointer` takes a factory ``make(directory, name) -> Checkpointer`` and tries
each property of :data:`CHECKPOINTER_PROPERTIES` in fresh temporary folders: a save loads back
equal, the listing is newest first and ignores foreign files, verification accepts a loadable
state and refuses (and removes) one that is not, pruning keeps the newest, a damaged newest
checkpoint falls back to the previous one, and interrupted saves are cleaned up.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from plugtrain.errors import CheckpointError, CorruptCheckpointError
from plugtrain.testing.conformance import ConformanceReport, PropertyFailed, run_properties
from plugtrain.train.checkpointing import Checkpointer

__all__ = ["CHECKPOINTER_PROPERTIES", "check_checkpointer"]

CHECKPOINTER_PROPERTIES = (
    "save_and_load",
    "list_newest_first",
    "verify",
    "prune",
    "fallback",
    "clean_up",
)

Factory = Callable[[Path, str], Checkpointer]
NAME = "checkpoint_{step}.mdl"


def _state(step: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(step)
    return {
        "model": {"weight": torch.randn(3, 4, generator=generator), "bias": torch.zeros(3)},
        "optimizer": {"state": {0: {"step": torch.tensor(float(step))}}, "param_groups": []},
        "global_step": step,
        "metadata": {"note": f"step {step}"},
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@contextmanager
def _fresh(make: Factory) -> Iterator[Checkpointer]:
    with tempfile.TemporaryDirectory(prefix="plugtrain-checkpointer-") as folder:
        yield make(Path(folder), NAME)


def _damage(path: Path) -> None:
    """Cut a checkpoint (file or folder) short, as a crash mid-write on another system would."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    biggest = max(files, key=lambda p: p.stat().st_size)
    data = biggest.read_bytes()
    biggest.write_bytes(data[: len(data) // 2])


def _save_and_load(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        path = checkpointer.save(7, _state(7))
        if path != checkpointer.path(7):
            raise PropertyFailed(f"saved to {path}, but path(7) is {checkpointer.path(7)}")
        loaded = checkpointer.load(path)
        if not _same(_state(7), {k: loaded.get(k) for k in _state(7)}):
            raise PropertyFailed("the loaded state differs from the saved one")
        if checkpointer.step_of(path) != 7:
            raise PropertyFailed(f"step_of({path.name}) is {checkpointer.step_of(path)}")


def _list_newest_first(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        for step in (2, 10, 5):
            checkpointer.save(step, _state(step))
        (checkpointer.directory / "notes.txt").write_text("not a checkpoint")
        steps = [step for step, _ in checkpointer.list_checkpoints()]
        if steps != [10, 5, 2]:
            raise PropertyFailed(f"listed steps {steps}, expected [10, 5, 2]")
        if checkpointer.newest() != checkpointer.path(10):
            raise PropertyFailed(f"newest() is {checkpointer.newest()}")


def _verify(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        state = _state(1)
        path = checkpointer.save(1, state)
        checkpointer.verify(path, state, {"model": object()})
        bad = {**_state(2), "callbacks": [{"state": {"hook": _Unloadable()}}]}
        bad_path = checkpointer.save(2, bad)
        try:
            checkpointer.verify(bad_path, bad, {"callbacks": [_Unloadable()]})
        except CheckpointError:
            pass
        else:
            raise PropertyFailed("a state that does not load with weights_only passed")
        if bad_path.exists():
            raise PropertyFailed(f"the unloadable checkpoint {bad_path} was kept")


def _prune(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        for step in range(1, 6):
            checkpointer.save(step, _state(step))
        removed = checkpointer.prune(2)
        steps = [step for step, _ in checkpointer.list_checkpoints()]
        removed_steps = sorted(checkpointer.step_of(p) or 0 for p in removed)
        if steps != [5, 4] or removed_steps != [1, 2, 3]:
            raise PropertyFailed(f"after prune(2): kept {steps}, removed {removed}")


def _fallback(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        checkpointer.save(1, _state(1))
        _damage(checkpointer.save(2, _state(2)))
        try:
            checkpointer.load(checkpointer.path(2))
        except CorruptCheckpointError:
            pass
        else:
            raise PropertyFailed("a damaged checkpoint loaded without CorruptCheckpointError")
        restored: list[int] = []

        def restore(path: Path) -> None:
            restored.append(int(checkpointer.load(path)["global_step"]))

        found = checkpointer.load_newest(restore)
        if found != checkpointer.path(1) or restored != [1]:
            raise PropertyFailed(f"load_newest gave {found}, restored steps {restored}")


def _clean_up(make: Factory) -> None:
    with _fresh(make) as checkpointer:
        checkpointer.save(3, _state(3))
        left = checkpointer.directory / f".{checkpointer.path(4).name}.tmp123"
        left.write_bytes(b"half a checkpoint")
        removed = checkpointer.clean_up()
        if left.exists() or removed != [left]:
            raise PropertyFailed(f"clean_up removed {removed}; {left} exists: {left.exists()}")
        if [s for s, _ in checkpointer.list_checkpoints()] != [3]:
            raise PropertyFailed("clean_up touched a finished checkpoint")


_PROPERTIES: dict[str, Callable[[Factory], None]] = {
    "save_and_load": _save_and_load,
    "list_newest_first": _list_newest_first,
    "verify": _verify,
    "prune": _prune,
    "fallback": _fallback,
    "clean_up": _clean_up,
}


def check_checkpointer(
    make: Factory, *, skip: Mapping[str, str] | None = None, raise_on_failure: bool = True
) -> ConformanceReport:
    """Try the Checkpointer contract on checkpointers from ``make(directory, name)``.

    :raises ConformanceError: naming every property that failed.
    """
    properties = {name: functools.partial(_PROPERTIES[name], make) for name in _PROPERTIES}
    return run_properties(
        f"checkpointer {getattr(make, '__name__', repr(make))}",
        properties,
        skip,
        raise_on_failure=raise_on_failure,
    )


class _Unloadable:
    """An object ``torch.load(weights_only=True)`` refuses (a custom class)."""
