"""Conformance checks of callbacks, loggers, models and data loaders.

:func:`check_callback` and :func:`check_logger` run a tiny real ``fit`` (a 4-to-3 linear model,
SGD, 6 steps on the CPU backend, a checkpoint every 2 steps, logging every step) in a temporary
``model_dir``; :func:`check_model` and :func:`check_dataloader` build the component directly.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from plugtrain.contract.protocols import CALLBACK_HOOKS
from plugtrain.errors import ComponentFailedError
from plugtrain.testing.conformance import (
    ConformanceReport,
    NotApplicable,
    PropertyFailed,
    run_properties,
)
from plugtrain.testing.optimizer_kit import weights_only_copy as _weights_only

__all__ = [
    "BACKEND_PROPERTIES",
    "CALLBACK_PROPERTIES",
    "DATALOADER_PROPERTIES",
    "LOGGER_PROPERTIES",
    "MODEL_PROPERTIES",
    "check_backend",
    "check_callback",
    "check_dataloader",
    "check_logger",
    "check_model",
]

CALLBACK_PROPERTIES = ("hooks_in_order", "state_round_trip", "checkpoint_resume")
"""The properties :func:`check_callback` tries (the names ``skip`` takes)."""
LOGGER_PROPERTIES = ("log_metrics_calls", "through_trainer", "state_round_trip")
"""The properties :func:`check_logger` tries (the names ``skip`` takes)."""
MODEL_PROPERTIES = ("forward", "seeded_init", "state_round_trip", "gradients")
"""The properties :func:`check_model` tries (the names ``skip`` takes)."""
DATALOADER_PROPERTIES = ("yields_pairs", "deterministic", "length")
"""The properties :func:`check_dataloader` tries (the names ``skip`` takes)."""
BACKEND_PROPERTIES = ("protocol", "processes_per_node", "fit")
"""The properties :func:`check_dataloader` tries (the names ``skip`` takes)."""

Build = Callable[..., Any]
_STEPS = 6

# Which hook may follow which: a fit's calls form this sequence (on_train_step_end only at
# logged steps, validation and checkpoint hooks in between).
_FIRST, _LAST = "on_fit_start", "on_fit_end"


def _batches(count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator))
        for _ in range(count)
    ]


def _tiny_fit(
    model_dir: str,
    *,
    callbacks: Iterable[Any] = (),
    loggers: Iterable[Any] | None = None,
    backend: Any = None,
    steps: int = _STEPS,
) -> Any:
    from plugtrain.train.trainer import Trainer

    extra: dict[str, Any] = {} if backend is None else {"backend": backend}
    if loggers is not None:
        extra["loggers"] = list(loggers)
    torch.manual_seed(0)
    trainer = Trainer(
        model_dir=model_dir,
        model=lambda: torch.nn.Linear(4, 3),
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.1),
        loop={"max_steps": steps, "eval_frequency": 3, "eval_steps": 1},
        checkpoint={"steps": 2},
        logging={"log_steps": 1},
        callbacks=list(callbacks),
        seed=0,
        **extra,
    )
    trainer.fit(_batches(steps, 1), _batches(1, 2))
    return trainer


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _state_round_trip(build: Build, arguments: Mapping[str, Any], used: Any) -> None:
    if not callable(getattr(used, "state_dict", None)):
        raise NotApplicable("it has no state_dict()")
    if not callable(getattr(used, "load_state_dict", None)):
        raise PropertyFailed("it has state_dict() but no load_state_dict(state)")
    state = used.state_dict()
    loaded = _weights_only(state)
    fresh = build(**arguments)
    fresh.load_state_dict(loaded)
    again = fresh.state_dict()
    if not _equal(again, state):
        message = (
            f"a fresh one loading the state returns state_dict() {again!r}; the original's "
            f"was {state!r}"
        )
        raise PropertyFailed(message)


class _Recording:
    """Stands for a callback: records each protocol method it defines, then calls it.

    Its ``state_dict`` and ``load_state_dict`` (when the callback has them) record the states
    given out and received, in ``states``.
    """

    def __init__(
        self, inner: Any, calls: list[str], states: dict[str, list[Any]] | None = None
    ) -> None:
        for name in CALLBACK_HOOKS:
            method = getattr(inner, name, None)
            if callable(method):
                setattr(self, name, self._recorded(name, method, calls))
        if states is not None and callable(getattr(inner, "state_dict", None)):
            saved, loaded = states.setdefault("saved", []), states.setdefault("loaded", [])

            def state_dict() -> Any:
                state = inner.state_dict()
                saved.append(state)
                return state

            def load_state_dict(state: Any) -> None:
                loaded.append(state)
                inner.load_state_dict(state)

            self.state_dict = state_dict
            self.load_state_dict = load_state_dict

    @staticmethod
    def _recorded(name: str, method: Callable[..., Any], calls: list[str]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append(name)
            return method(*args)

        return call


def _order_problem(calls: list[str]) -> str | None:
    calls = [name for name in calls if name != "on_model_built"]  # when the Trainer is made
    if not calls:
        return None
    if (_FIRST in calls and calls[0] != _FIRST) or (_LAST in calls and calls[-1] != _LAST):
        return f"a fit's calls must start with {_FIRST} and end with {_LAST}: {calls}"
    open_step = False
    for index, name in enumerate(calls):
        if name == "on_train_step_start":
            open_step = True
        elif name == "on_before_optimizer_step" and not open_step:
            return f"call {index} ({name}) is not inside a step: {calls}"
        elif name == "on_train_step_end":
            open_step = False
    return None


def _callback_checks(build: Build, arguments: Mapping[str, Any]) -> dict[str, Callable[[], None]]:
    used: dict[str, Any] = {}

    def hooks_in_order() -> None:
        callback = build(**arguments)
        used["callback"] = callback
        defined = [n for n in CALLBACK_HOOKS if callable(getattr(callback, n, None))]
        if not defined:
            message = f"it defines none of the Callback methods ({', '.join(CALLBACK_HOOKS)})"
            raise PropertyFailed(message)
        seen: list[str] = []
        mine: list[str] = []
        observer = _Recording(_AllHooks(), seen)
        with tempfile.TemporaryDirectory() as model_dir:
            try:
                _tiny_fit(model_dir, callbacks=[observer, _Recording(callback, mine)])
            except Exception as exc:
                hook = mine[-1] if mine else "its construction"
                own = exc.__cause__ if isinstance(exc, ComponentFailedError) else None
                cause = own if own is not None else exc  # the callback's own error, not the wrapper
                message = f"a 6-step fit raised {type(cause).__name__}: {cause} (last hook: {hook})"
                raise PropertyFailed(message) from exc
        expected = [name for name in seen if name in defined]
        if mine != expected:
            message = f"its hooks were called as {mine}; the Trainer's sequence gives {expected}"
            raise PropertyFailed(message)
        problem = _order_problem(mine)
        if problem:
            raise PropertyFailed(problem)

    def state_round_trip() -> None:
        callback = used.get("callback") or build(**arguments)
        _state_round_trip(build, arguments, callback)

    def checkpoint_resume() -> None:
        if not callable(getattr(build(**arguments), "state_dict", None)):
            raise NotApplicable("it has no state_dict()")
        first: dict[str, list[Any]] = {}
        second: dict[str, list[Any]] = {}
        with tempfile.TemporaryDirectory() as model_dir:
            _tiny_fit(model_dir, callbacks=[_Recording(build(**arguments), [], first)])
            last = torch.load(
                f"{model_dir}/checkpoint_{_STEPS}.mdl", map_location="cpu", weights_only=True
            )
            if "callbacks" not in last:
                raise NotApplicable("this plugtrain's checkpoints hold no callback state")
            # a second fit in the same model_dir resumes from checkpoint_6 with a fresh callback
            _tiny_fit(
                model_dir,
                callbacks=[_Recording(build(**arguments), [], second)],
                steps=_STEPS + 2,
            )
        if not first.get("saved"):
            raise PropertyFailed("the Trainer never asked for its state_dict() at a checkpoint")
        received = second.get("loaded") or []
        if not received:
            raise PropertyFailed("resuming from a checkpoint never called its load_state_dict()")
        if not _equal(received[0], first["saved"][-1]):
            message = f"resuming gave it the state {received[0]!r}; it saved {first['saved'][-1]!r}"
            raise PropertyFailed(message)

    return {
        "hooks_in_order": hooks_in_order,
        "state_round_trip": state_round_trip,
        "checkpoint_resume": checkpoint_resume,
    }


class _AllHooks:
    """A callback defining every protocol method, doing nothing (the Trainer's sequence)."""

    def __getattr__(self, name: str) -> Any:
        if name in CALLBACK_HOOKS:
            return lambda *args: None
        raise AttributeError(name)


def check_callback(
    callback: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``callback`` (a class, or ``callback(**arguments)``) works in a real ``fit``.

    - ``hooks_in_order``: in a 6-step fit (checkpoints every 2 steps, an evaluation every 3) the
      methods of :class:`plugtrain.protocols.Callback` it defines are called in the Trainer's
      order (``on_fit_start`` first, ``on_fit_end`` last, ``on_before_optimizer_step`` inside a
      step) and none raises: its calls are exactly the Trainer's sequence restricted to the
      methods it defines.
    - ``state_round_trip``: its ``state_dict()`` after that fit goes through
      ``torch.load(weights_only=True)`` into a fresh one, whose ``state_dict()`` is then equal
      (not applicable without ``state_dict``).
    - ``checkpoint_resume``: a second fit resuming from the first one's last checkpoint gives a
      fresh callback, through ``load_state_dict``, the state the first one saved there (not
      applicable without ``state_dict``, or when this plugtrain's checkpoints hold no callback
      state).

    :param skip: ``{property: reason}`` for properties that do not apply (kept in the report).
    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    label = f"callback {name or getattr(callback, '__name__', repr(callback))}"
    properties = _callback_checks(callback, arguments or {})
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)


class _LoggerRecording:
    def __init__(self, inner: Any, calls: list[tuple[Any, ...]]) -> None:
        self.inner, self.calls = inner, calls

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        self.calls.append(("log_metrics", step, split, dict(metrics)))
        self.inner.log_metrics(step, split, metrics)

    def close(self) -> None:
        self.calls.append(("close",))
        self.inner.close()


def _logger_checks(build: Build, arguments: Mapping[str, Any]) -> dict[str, Callable[[], None]]:
    used: dict[str, Any] = {}

    def log_metrics_calls() -> None:
        logger = build(**arguments)
        used["logger"] = logger
        for method in ("log_metrics", "close"):
            if not callable(getattr(logger, method, None)):
                raise PropertyFailed(f"it has no {method}() (plugtrain.protocols.Logger)")
        for step in (1, 2, 3):
            logger.log_metrics(step, "train", {"loss": 1.0 / step, "lr": 0.1})
        logger.log_metrics(3, "val", {"loss": 0.5, "accuracy": 0.75})
        logger.close()

    def through_trainer() -> None:
        from plugtrain.train.trainer import Trainer

        if "loggers" not in inspect.signature(Trainer).parameters:
            raise NotApplicable("this plugtrain's Trainer takes no loggers")
        calls: list[tuple[Any, ...]] = []
        with tempfile.TemporaryDirectory() as model_dir:
            _tiny_fit(model_dir, loggers=[_LoggerRecording(build(**arguments), calls)])
        if not calls or calls[-1] != ("close",) or calls.count(("close",)) != 1:
            message = f"close() must be called once, last; the calls were {calls}"
            raise PropertyFailed(message)
        train_steps = [c[1] for c in calls if c[0] == "log_metrics" and c[2] == "train"]
        if train_steps != sorted(train_steps) or not train_steps:
            message = f"train metrics were logged at steps {train_steps}"
            raise PropertyFailed(message)

    def state_round_trip() -> None:
        _state_round_trip(build, arguments, used.get("logger") or build(**arguments))

    return {
        "log_metrics_calls": log_metrics_calls,
        "through_trainer": through_trainer,
        "state_round_trip": state_round_trip,
    }


def check_logger(
    logger: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``logger`` (a class, or ``logger(**arguments)``) meets the Logger protocol.

    - ``log_metrics_calls``: ``log_metrics(step, split, metrics)`` takes train metrics at steps
      1, 2, 3 and val metrics at step 3, then ``close()``, without an error.
    - ``through_trainer``: in a 6-step fit, ``log_metrics`` receives the train metrics in step
      order and ``close()`` is called once, last (not applicable to a Trainer without
      ``loggers``).
    - ``state_round_trip``: as for callbacks (not applicable without ``state_dict``).

    Give ``arguments`` that write into a temporary folder (the ``tmp_path`` fixture).

    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    label = f"logger {name or getattr(logger, '__name__', repr(logger))}"
    properties = _logger_checks(logger, arguments or {})
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)


def _first_output(model: Any, inputs: Any) -> torch.Tensor:
    """The model's output tensor, or the ``loss`` of the mapping it returns."""
    outputs = model(inputs)
    if isinstance(outputs, Mapping) and isinstance(outputs.get("loss"), torch.Tensor):
        loss: torch.Tensor = outputs["loss"]
        return loss
    if not isinstance(outputs, torch.Tensor):
        message = (
            f"forward returned {type(outputs).__name__}, not a tensor nor a mapping holding a "
            "'loss' tensor"
        )
        raise PropertyFailed(message)
    return outputs


def check_model(
    model: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    inputs: Any,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``model`` (a class, or ``model(**arguments)`` returning an ``nn.Module``) behaves.

    - ``forward``: ``model(inputs)`` returns a finite tensor (outputs or a scalar loss), or a
      mapping holding a finite ``loss`` tensor; the properties below use that tensor.
    - ``seeded_init``: built twice after ``torch.manual_seed(0)``, the state dicts are equal.
    - ``state_round_trip``: a model built under another seed loading the first's
      ``state_dict()`` through ``torch.load(weights_only=True)`` gives bitwise the same outputs
      (in ``eval()`` mode).
    - ``gradients``: the sum of the outputs reaches every trainable parameter with a finite
      gradient.

    :param inputs: what the Trainer passes to ``forward``: a pair's inputs, or a whole batch
        (a mapping ...) for a model that computes its own loss.
    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    given = dict(arguments or {})

    def seeded(seed: int) -> Any:
        torch.manual_seed(seed)
        return model(**given)

    def forward() -> None:
        built = seeded(0).eval()
        with torch.no_grad():
            outputs = _first_output(built, inputs)
        if not bool(torch.isfinite(outputs).all()):
            raise PropertyFailed(f"forward returned non-finite values: {outputs}")

    def seeded_init() -> None:
        first, second = seeded(0).state_dict(), seeded(0).state_dict()
        if not _equal(first, second):
            differ = [k for k in first if not _equal(first[k], second.get(k))]
            raise PropertyFailed(f"two builds under seed 0 differ in {differ}")

    def state_round_trip() -> None:
        source = seeded(0).eval()
        target = seeded(1).eval()
        target.load_state_dict(_weights_only(source.state_dict()))
        with torch.no_grad():
            want, got = _first_output(source, inputs), _first_output(target, inputs)
        if not torch.equal(want, got):
            gap = float((want - got).abs().max())
            raise PropertyFailed(f"after loading the state, outputs differ by up to {gap:.3g}")

    def gradients() -> None:
        built = seeded(0).train()
        _first_output(built, inputs).sum().backward()
        missing = [
            n
            for n, p in built.named_parameters()
            if p.requires_grad and (p.grad is None or not bool(torch.isfinite(p.grad).all()))
        ]
        if missing:
            raise PropertyFailed(f"no finite gradient reaches the parameters {missing}")

    properties = {
        "forward": forward,
        "seeded_init": seeded_init,
        "state_round_trip": state_round_trip,
        "gradients": gradients,
    }
    label = f"model {name or getattr(model, '__name__', repr(model))}"
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)


def _first_batches(loader: Any, count: int) -> list[Any]:
    found = []
    for batch in loader:
        found.append(batch)
        if len(found) == count:
            break
    return found


def check_dataloader(
    dataloader: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``dataloader`` (``dataloader(**arguments)`` returning an iterable) behaves.

    - ``yields_pairs``: each of its first 3 batches is an ``(inputs, targets)`` pair of tensors
      (or of nested tensors) with as many targets as inputs, or a mapping (for a model that
      computes its own loss) whose tensors agree in their first dimension.
    - ``deterministic``: built twice (``torch.manual_seed(0)`` before each), the first 3
      batches are bitwise equal.
    - ``length``: ``len(loader)`` equals the number of batches one pass yields (not applicable
      without ``__len__``).

    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    given = dict(arguments or {})

    def seeded() -> Any:
        torch.manual_seed(0)
        return dataloader(**given)

    def yields_pairs() -> None:
        batches = _first_batches(seeded(), 3)
        if not batches:
            raise PropertyFailed("it yields no batch")
        for index, batch in enumerate(batches):
            if isinstance(batch, Mapping):
                sizes = {k: len(v) for k, v in batch.items() if isinstance(v, torch.Tensor)}
                if len(set(sizes.values())) > 1:
                    message = f"batch {index}'s tensors differ in their first dimension: {sizes}"
                    raise PropertyFailed(message)
                continue
            if not isinstance(batch, list | tuple) or len(batch) != 2:
                message = (
                    f"batch {index} is {type(batch).__name__}, not an (inputs, targets) pair "
                    "nor a mapping"
                )
                raise PropertyFailed(message)
            inputs, targets = batch
            tensors = isinstance(inputs, torch.Tensor) and isinstance(targets, torch.Tensor)
            if tensors and len(inputs) != len(targets):
                message = f"batch {index} has {len(inputs)} inputs and {len(targets)} targets"
                raise PropertyFailed(message)

    def deterministic() -> None:
        if not _equal(_first_batches(seeded(), 3), _first_batches(seeded(), 3)):
            raise PropertyFailed("two loaders built alike (seed 0) yield different batches")

    def length() -> None:
        loader = seeded()
        if not hasattr(loader, "__len__"):
            raise NotApplicable("it has no __len__")
        count = sum(1 for _ in loader)
        if len(loader) != count:
            raise PropertyFailed(f"len() is {len(loader)} but one pass yields {count} batches")

    properties = {"yields_pairs": yields_pairs, "deterministic": deterministic, "length": length}
    label = f"dataloader {name or getattr(dataloader, '__name__', repr(dataloader))}"
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)


def check_backend(
    backend: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``backend`` (a class, usually on ``plugtrain.backend_base.BackendBase``) works.

    The process's backend type is released before and after each build (one type per process).

    - ``protocol``: a built backend has every member of :class:`plugtrain.protocols.Backend`.
    - ``processes_per_node``: the class method answers a positive ``int`` for ``arguments``.
    - ``fit``: a 6-step fit of a tiny model with checkpoints runs on it (on its ``device``) and
      ``close()`` succeeds; skip it, with the reason, where the device is absent.

    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    from plugtrain.bases.backend import missing_backend_members, release_backend_type

    given = dict(arguments or {})

    def built() -> Any:
        release_backend_type()
        return backend(**given)

    def protocol() -> None:
        try:
            missing = missing_backend_members(built())
        finally:
            release_backend_type()
        if missing:
            raise PropertyFailed(f"it lacks {missing} of plugtrain.protocols.Backend")

    def processes_per_node() -> None:
        count = backend.processes_per_node(given)  # type: ignore[attr-defined]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise PropertyFailed(f"processes_per_node({given}) returned {count!r}")

    def fit() -> None:
        try:
            instance = built()
            with tempfile.TemporaryDirectory() as model_dir:
                trainer = _tiny_fit(model_dir, backend=instance)
                if trainer.global_step != _STEPS:
                    message = f"the fit stopped at step {trainer.global_step} of {_STEPS}"
                    raise PropertyFailed(message)
            instance.close()
        finally:
            release_backend_type()

    properties = {"protocol": protocol, "processes_per_node": processes_per_node, "fit": fit}
    label = f"backend {name or getattr(backend, '__name__', repr(backend))}"
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)
