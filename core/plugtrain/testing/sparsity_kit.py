"""Conformance checks of sparsity algorithms (:func:`check_sparsity`).

Each property runs real fits on the CPU backend: a 6-16-3 perceptron (the default parameter
filter gives the algorithm both weights), AdamW, 6 steps, a checkpoint every 3, in temporary
model directories.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from plugtrain.testing.conformance import ConformanceReport, PropertyFailed, run_properties
from plugtrain.testing.optimizer_kit import weights_only_copy

if TYPE_CHECKING:
    from plugtrain.train.loop import Sparsity
    from plugtrain.train.trainer import Trainer

__all__ = ["SPARSITY_PROPERTIES", "check_sparsity"]

SPARSITY_PROPERTIES = (
    "protocol",
    "masks_in_a_fit",
    "state_round_trip",
    "checkpoint_resume",
    "generator_only",
)
"""The properties :func:`check_sparsity` tries (the names ``skip`` takes)."""

_STEPS = 6
_METHODS = ("initial_masks", "advance", "update_masks", "state_dict", "load_state_dict")

Build = Callable[..., Any]


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(11)
    return [
        (torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator))
        for _ in range(_STEPS)
    ]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


class _Watch:
    """Records the masks after every step; optionally draws from the global RNG first."""

    def __init__(self, disturb: bool = False) -> None:
        self.disturb = disturb
        self.masks: list[dict[str, torch.Tensor]] = []

    def on_train_step_start(self, trainer: Trainer, step: int) -> None:
        if self.disturb:
            torch.rand(7)
            torch.manual_seed(1000 + step)

    def on_train_step_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        self.masks.append({p.name: p.mask.clone() for p in _sparsity(trainer).parameters})


def _fit(
    build: Build,
    arguments: Mapping[str, Any],
    model_dir: Path,
    *,
    steps: int = _STEPS,
    watch: _Watch | None = None,
    made: list[Any] | None = None,
) -> Trainer:
    from plugtrain.train.loop import SparsityGroup
    from plugtrain.train.trainer import Trainer

    def group(params: list[tuple[str, torch.Tensor]]) -> Any:
        algorithm = build(params, **arguments)
        if made is not None:
            made.append(algorithm)
        return algorithm

    trainer = Trainer(
        model_dir=model_dir,
        model=_model,
        optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.05),
        loop={"max_steps": steps},
        checkpoint={"steps": 3},
        logging={"log_steps": 1},
        callbacks=[watch] if watch is not None else [],
        seed=0,
        sparsity=[SparsityGroup(group, None, "check_sparsity")],
    )
    trainer.fit(_batches())
    return trainer


def _sparsity(trainer: Trainer) -> Sparsity:
    """The sparsity of one of these fits (every one has some)."""
    assert trainer.sparsity is not None
    return trainer.sparsity


def _same_model(a: Trainer, b: Trainer) -> str | None:
    first, second = a.model.state_dict(), b.model.state_dict()
    for key, value in first.items():
        if not torch.equal(value, second[key]):
            return str(key)
    return None


def _checks(build: Build, arguments: Mapping[str, Any]) -> dict[str, Callable[[], None]]:
    def protocol() -> None:
        algorithm = build([("w", torch.zeros(4, 4))], **arguments)
        missing = [m for m in _METHODS if not callable(getattr(algorithm, m, None))]
        if missing:
            raise PropertyFailed(f"it lacks {', '.join(missing)}")

    def masks_in_a_fit() -> None:
        watch = _Watch()
        with tempfile.TemporaryDirectory() as folder:
            trainer = _fit(build, arguments, Path(folder), watch=watch)
        for step, masks in enumerate(watch.masks, 1):
            for sparse in _sparsity(trainer).parameters:
                mask = masks[sparse.name]
                if mask.dtype != torch.bool:
                    raise PropertyFailed(
                        f"the mask of {sparse.name} is {mask.dtype} at step {step}"
                    )
        final = _sparsity(trainer).parameters
        for sparse in final:
            if torch.count_nonzero(sparse.param[~sparse.mask]):
                raise PropertyFailed(f"{sparse.name} is not zero where masked after the fit")

    def state_round_trip() -> None:
        made: list[Any] = []
        with tempfile.TemporaryDirectory() as folder:
            trainer = _fit(build, arguments, Path(folder), made=made)
        state = made[0].state_dict()
        loaded = weights_only_copy(state)
        params = [(p.name, p.param) for p in _sparsity(trainer).parameters]
        fresh = build(params, **arguments)
        fresh.load_state_dict(loaded)
        again = weights_only_copy(fresh.state_dict())
        if repr(again) != repr(loaded):
            message = f"a fresh one loading {loaded!r} returns state_dict() {again!r}"
            raise PropertyFailed(message)

    def checkpoint_resume() -> None:
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
            straight = _fit(build, arguments, Path(one))
            _fit(build, arguments, Path(two), steps=3)
            resumed = _fit(build, arguments, Path(two))
            differs = _same_model(straight, resumed)
        if differs is not None:
            message = (
                f"a fit resumed at step 3 ends with another {differs} than an uninterrupted one "
                "(is all its state in state_dict()?)"
            )
            raise PropertyFailed(message)

    def generator_only() -> None:
        calm, disturbed = _Watch(), _Watch(disturb=True)
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
            _fit(build, arguments, Path(one), watch=calm)
            _fit(build, arguments, Path(two), watch=disturbed)
        for step, (a, b) in enumerate(zip(calm.masks, disturbed.masks, strict=True), 1):
            for name in a:
                if not torch.equal(a[name], b[name]):
                    message = (
                        f"the mask of {name} at step {step} changed with torch's global RNG: "
                        "draw from the generator the core hands over, or the processes of a "
                        "data-parallel run disagree"
                    )
                    raise PropertyFailed(message)

    return {
        "protocol": protocol,
        "masks_in_a_fit": masks_in_a_fit,
        "state_round_trip": state_round_trip,
        "checkpoint_resume": checkpoint_resume,
        "generator_only": generator_only,
    }


def check_sparsity(
    algorithm: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``algorithm`` (a class, or ``algorithm(params, **arguments)``) works in fits.

    - ``protocol``: it has the methods of :class:`plugtrain.protocols.SparsityAlgorithm`.
    - ``masks_in_a_fit``: in a 6-step fit its masks are bool tensors, and the weights are zero
      where masked at the end.
    - ``state_round_trip``: its ``state_dict()`` after the fit goes through
      ``torch.load(weights_only=True)`` into a fresh one, whose ``state_dict()`` is the same.
    - ``checkpoint_resume``: a fit interrupted after 3 steps and resumed from its checkpoint
      ends with the same weights and masks as one that was not.
    - ``generator_only``: the masks do not change when torch's global RNG is disturbed before
      every step (randomness must come from the generator it is handed, which is the same on
      every process).

    :param skip: ``{property: reason}`` for properties that do not apply (kept in the report).
    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    label = f"sparsity algorithm {name or getattr(algorithm, '__name__', repr(algorithm))}"
    properties = _checks(algorithm, arguments or {})
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)
