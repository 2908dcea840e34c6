"""The behavioural conformance check of an optimizer: :func:`check_optimizer`.

Every property runs the optimizer on small tensors whose gradients come from a fixed convex
loss (seeded; nothing random between runs), so two runs that should agree are compared exactly
or within the tolerance each property states.
"""

from __future__ import annotations

import inspect
import io
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from plugtrain.testing.conformance import (
    ConformanceReport,
    NotApplicable,
    PropertyFailed,
    construction,
    run_properties,
)

__all__ = ["OPTIMIZER_PROPERTIES", "check_optimizer"]

OPTIMIZER_PROPERTIES = (
    "state_round_trip",
    "per_group_hyperparameters",
    "no_grad_untouched",
    "dtypes",
    "non_contiguous",
    "empty_tensors",
    "add_param_group",
    "closure",
    "foreach_agrees",
    "deterministic",
    "decreases_loss",
    "evaluation_modes",
)
"""The properties :func:`check_optimizer` tries, in order (the names ``skip`` takes)."""

Build = Callable[..., Any]
_SHAPES = ((4, 3), (3,))


def _start(dtype: torch.dtype, shapes: Sequence[tuple[int, ...]] = _SHAPES) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [
        torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype) for shape in shapes
    ]


def _target(like: torch.Tensor) -> torch.Tensor:
    """The minimum of the loss for a tensor of ``like``'s shape (seeded by the shape)."""
    generator = torch.Generator().manual_seed(
        100 + sum(10**i * n for i, n in enumerate(like.shape))
    )
    values = torch.randn(like.shape, generator=generator, dtype=torch.float64)
    return values.to(like.dtype)


def _set_gradients(params: Sequence[torch.Tensor], step: int) -> None:
    """The gradient of ``0.5 * sum((p - target)**2)``, scaled by a step-dependent wobble."""
    wobble = 1.0 + 0.25 * math.sin(step)
    for p in params:
        p.grad = ((p.detach() - _target(p)) * wobble).to(p.dtype)


def _loss(params: Sequence[torch.Tensor]) -> torch.Tensor:
    return sum(
        (0.5 * (p - _target(p)).double().pow(2).sum() for p in params),
        torch.zeros((), dtype=torch.float64),
    )


def _leaves(values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [v.detach().clone().requires_grad_() for v in values]


def _run(optimizer: Any, params: Sequence[torch.Tensor], steps: range) -> None:
    for step in steps:
        _set_gradients(params, step)
        optimizer.step()


def weights_only_copy(state: Any) -> Any:
    """``state`` through ``torch.save`` and ``torch.load(weights_only=True)``, as checkpoints go.

    :raises PropertyFailed: naming why it does not load that way.
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        return torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:
        message = (
            "state_dict() does not load with torch.load(weights_only=True): "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1:]}; keep only tensors, "
            "numbers, strings, None and lists, tuples and dicts of them in it"
        )
        raise PropertyFailed(message) from exc


def _difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    if a.numel() == 0:
        return "nothing (empty)"
    gap = (a.detach().double() - b.detach().double()).abs()
    worst = int(gap.argmax())
    flat_a, flat_b = a.detach().reshape(-1), b.detach().reshape(-1)
    return (
        f"up to {float(gap.max()):.3g} (element {worst}: {float(flat_a[worst])!r} vs "
        f"{float(flat_b[worst])!r})"
    )


def _compare(
    got: Sequence[torch.Tensor],
    want: Sequence[torch.Tensor],
    what: str,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> None:
    """Fail naming the first tensor of ``got`` that differs from ``want`` beyond the tolerance."""
    for index, (got_one, want_one) in enumerate(zip(got, want, strict=True)):
        a, b = got_one.detach(), want_one.detach()
        if rtol == 0.0 and atol == 0.0:
            same = a.dtype == b.dtype and torch.equal(a, b)
            tolerance = "bitwise"
        else:
            same = a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol, atol)
            tolerance = f"rtol={rtol:g}, atol={atol:g}"
        if not same:
            message = f"{what}: tensor {index} differs by {_difference(a, b)} ({tolerance})"
            raise PropertyFailed(message)


class _OptimizerChecks:
    def __init__(
        self,
        build: Build,
        arguments: Mapping[str, Any],
        steps: int,
        group_overrides: Mapping[str, Any] | None,
        descent_steps: int,
    ) -> None:
        self.build = build
        self.arguments = dict(arguments)
        self.steps = steps
        self.group_overrides = group_overrides
        self.descent_steps = descent_steps

    def make(self, params: Any, **extra: Any) -> Any:
        return self.build(params, **{**self.arguments, **extra})

    def trajectory(self, dtype: torch.dtype = torch.float32, **extra: Any) -> list[torch.Tensor]:
        params = _leaves(_start(dtype))
        _run(self.make(params, **extra), params, range(2 * self.steps))
        return params

    # -- the properties -------------------------------------------------------------------

    def state_round_trip(self) -> None:
        params = _leaves(_start(torch.float32))
        optimizer = self.make(params)
        _run(optimizer, params, range(self.steps))
        loaded = weights_only_copy(optimizer.state_dict())
        copies = _leaves(params)
        resumed = self.make(copies)
        resumed.load_state_dict(loaded)
        _run(optimizer, params, range(self.steps, 2 * self.steps))
        _run(resumed, copies, range(self.steps, 2 * self.steps))
        _compare(
            copies,
            params,
            f"after a weights-only state_dict round trip at step {self.steps}, {self.steps} "
            "more steps do not continue the uninterrupted run",
        )

    def _override(self) -> dict[str, Any]:
        if self.group_overrides is not None:
            return dict(self.group_overrides)
        probe = self.make(_leaves(_start(torch.float32)[:1]))
        lr = probe.defaults.get("lr")
        if isinstance(lr, int | float) and not isinstance(lr, bool) and lr > 0:
            return {"lr": lr * 0.5}
        message = (
            f"the optimizer's default lr is {lr!r}, so the kit cannot pick a second value; "
            "pass group_overrides={'hyperparameter': value}"
        )
        raise PropertyFailed(message)

    def per_group_hyperparameters(self) -> None:
        override = self._override()
        first, second = _leaves(_start(torch.float32))
        optimizer = self.make([{"params": [first]}, {"params": [second], **override}])
        _run(optimizer, [first, second], range(self.steps))
        alone = _leaves(_start(torch.float32))
        _run(self.make([alone[0]]), [alone[0]], range(self.steps))
        overridden = _leaves(_start(torch.float32))[1]
        _run(self.make([overridden], **override), [overridden], range(self.steps))
        plain = _leaves(_start(torch.float32))[1]
        _run(self.make([plain]), [plain], range(self.steps))
        if torch.equal(overridden.detach(), plain.detach()):
            message = (
                f"group_overrides {override} do not change a run at all, so they cannot test "
                "per-group values; pass group_overrides that matter"
            )
            raise PropertyFailed(message)
        _compare(
            [second],
            [overridden],
            f"a param group with {override} does not follow an optimizer built with {override} "
            "(rtol=1e-6)",
            rtol=1e-6,
            atol=1e-9,
        )
        _compare(
            [first],
            [alone[0]],
            "the group with the optimizer's own values does not follow the optimizer alone",
            rtol=1e-6,
            atol=1e-9,
        )

    def no_grad_untouched(self) -> None:
        moving, still = _leaves(_start(torch.float32))
        before = still.detach().clone()
        optimizer = self.make([moving, still])
        for step in range(2 * self.steps):
            _set_gradients([moving], step)
            still.grad = None
            optimizer.step()
        _compare(
            [still],
            [before],
            f"a parameter whose .grad is None changed in {2 * self.steps} steps",
        )

    def dtypes(self) -> None:
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            params = _leaves(_start(dtype))
            before = [p.detach().clone() for p in params]
            try:
                _run(self.make(params), params, range(self.steps))
            except Exception as exc:
                message = f"{dtype} parameters: step() raised {type(exc).__name__}: {exc}"
                raise PropertyFailed(message) from exc
            for index, (p, old) in enumerate(zip(params, before, strict=True)):
                if p.dtype != dtype:
                    message = f"a {dtype} parameter (tensor {index}) became {p.dtype}"
                    raise PropertyFailed(message)
                if not bool(torch.isfinite(p.detach()).all()):
                    message = f"{dtype} parameters: tensor {index} holds non-finite values {p}"
                    raise PropertyFailed(message)
                if dtype != torch.bfloat16 and torch.equal(p.detach(), old):
                    message = (
                        f"{dtype} parameters: tensor {index} did not move in {self.steps} steps"
                    )
                    raise PropertyFailed(message)

    def non_contiguous(self) -> None:
        base = _start(torch.float32, ((3, 4),))[0]
        strided = base.t().detach().requires_grad_()  # a 4x3 view with swapped strides
        if strided.is_contiguous():  # pragma: no cover - torch's layout rules
            raise NotApplicable("could not make a non-contiguous tensor")
        dense = base.t().contiguous().requires_grad_()
        _run(self.make([strided]), [strided], range(2 * self.steps))
        _run(self.make([dense]), [dense], range(2 * self.steps))
        _compare(
            [strided],
            [dense],
            "a non-contiguous (transposed) parameter is updated differently from the same "
            "values stored contiguously (rtol=1e-5, atol=1e-6)",
            rtol=1e-5,
            atol=1e-6,
        )

    def empty_tensors(self) -> None:
        full = _leaves(_start(torch.float32))
        empties = [torch.zeros(0, requires_grad=True), torch.zeros(0, 3, requires_grad=True)]
        try:
            _run(self.make([*full, *empties]), [*full, *empties], range(self.steps))
        except Exception as exc:
            message = (
                "step() with empty parameters (shapes (0,) and (0, 3)) among others raised "
                f"{type(exc).__name__}: {exc}"
            )
            raise PropertyFailed(message) from exc
        for empty, shape in zip(empties, ((0,), (0, 3)), strict=True):
            if tuple(empty.shape) != shape:
                message = f"an empty parameter of shape {shape} became {tuple(empty.shape)}"
                raise PropertyFailed(message)
        alone = _leaves(_start(torch.float32))
        _run(self.make(alone), alone, range(self.steps))
        _compare(
            full,
            alone,
            "empty parameters change how the other parameters are updated (rtol=1e-6)",
            rtol=1e-6,
            atol=1e-9,
        )

    def add_param_group(self) -> None:
        first, second = _leaves(_start(torch.float32))
        optimizer = self.make([first])
        _run(optimizer, [first], range(self.steps))
        optimizer.add_param_group({"params": [second]})
        group = optimizer.param_groups[-1]
        missing = sorted(set(optimizer.defaults) - set(group))
        if missing:
            message = f"a group added with add_param_group() lacks the defaults {missing}"
            raise PropertyFailed(message)
        for step in range(self.steps, 2 * self.steps):
            _set_gradients([first, second], step)
            optimizer.step()
        # the added tensor starts fresh: as a new optimizer on it would, from the step it joined
        fresh = _leaves(_start(torch.float32))[1]
        late = self.make([fresh])
        _run(late, [fresh], range(self.steps, 2 * self.steps))
        _compare(
            [second],
            [fresh],
            "a parameter added with add_param_group() after "
            f"{self.steps} steps is not updated as by a new optimizer (rtol=1e-6)",
            rtol=1e-6,
            atol=1e-9,
        )

    def closure(self) -> None:
        params = _leaves(_start(torch.float32))
        optimizer = self.make(params)
        calls: list[torch.Tensor] = []

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = _loss(params)
            loss.backward()
            calls.append(loss.detach())
            return loss

        returned = optimizer.step(closure)
        if isinstance(returned, torch.Tensor):
            returned = returned.detach()
        if not calls:
            raise PropertyFailed("step(closure) never called the closure")
        if returned is None or not math.isclose(float(returned), float(calls[0]), rel_tol=0):
            message = (
                f"step(closure) returned {returned!r}; the closure's loss was {float(calls[0])!r}"
            )
            raise PropertyFailed(message)

    def foreach_agrees(self) -> None:
        try:
            parameters = inspect.signature(self.build).parameters
        except (TypeError, ValueError) as exc:
            message = f"no inspectable signature: {exc}"
            raise NotApplicable(message) from exc
        if "foreach" not in parameters:
            raise NotApplicable("the optimizer has no foreach argument")
        multi = self.trajectory(torch.float64, foreach=True)
        single = self.trajectory(torch.float64, foreach=False)
        _compare(
            multi,
            single,
            "foreach=True and foreach=False disagree in float64 (rtol=1e-9, atol=1e-12)",
            rtol=1e-9,
            atol=1e-12,
        )

    def deterministic(self) -> None:
        _compare(self.trajectory(), self.trajectory(), "two identical runs differ")

    def decreases_loss(self) -> None:
        params = _leaves(_start(torch.float32))
        optimizer = self.make(params)
        with torch.no_grad():
            before = float(_loss(params))
        _run(optimizer, params, range(self.descent_steps))
        with torch.no_grad():
            after = float(_loss(params))
        if not after < before:
            message = (
                f"{self.descent_steps} steps on the convex loss 0.5*|p - target|^2 took it from "
                f"{before:.6g} to {after:.6g} with arguments {self.arguments}"
            )
            raise PropertyFailed(message)

    def evaluation_modes(self) -> None:
        """The evaluation contract of :class:`plugtrain.protocols.Optimizer` (plugin API 1.1)."""
        probe = self.make(_leaves(_start(torch.float64)))
        has_train = callable(getattr(probe, "train", None))
        has_eval = callable(getattr(probe, "eval", None))
        if not (has_train or has_eval):
            raise NotApplicable("the optimizer defines neither train() nor eval()")
        if not (has_train and has_eval):
            message = (
                "the optimizer defines only one of train() and eval(); the Trainer calls them "
                "as a pair, so it would call neither"
            )
            raise PropertyFailed(message)
        params = _leaves(_start(torch.float64))
        optimizer = self.make(params)
        optimizer.train()
        _run(optimizer, params, range(self.steps))
        training = [p.detach().clone() for p in params]
        optimizer.eval()
        evaluating = [p.detach().clone() for p in params]
        optimizer.eval()
        _compare(params, evaluating, "a second eval() changed the parameters again")
        saved = weights_only_copy(optimizer.state_dict())
        optimizer.train()
        _compare(
            params,
            training,
            "eval() then train() does not give the training parameters back (rtol=1e-9)",
            rtol=1e-9,
            atol=1e-12,
        )
        optimizer.train()
        _compare(
            params,
            training,
            "a second train() changed the parameters again (rtol=1e-9)",
            rtol=1e-9,
            atol=1e-12,
        )
        # a checkpoint is written in eval() mode; a resumed fit calls train() on it
        copies = _leaves(evaluating)
        resumed = self.make(copies)
        resumed.load_state_dict(saved)
        resumed.train()
        _run(optimizer, params, range(self.steps, 2 * self.steps))
        _run(resumed, copies, range(self.steps, 2 * self.steps))
        _compare(
            copies,
            params,
            "a state_dict() saved in eval() mode, loaded with the evaluation parameters and put "
            "back in train() mode, does not continue the run (rtol=1e-9)",
            rtol=1e-9,
            atol=1e-12,
        )


def check_optimizer(
    optimizer: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    steps: int = 3,
    group_overrides: Mapping[str, Any] | None = None,
    descent_steps: int = 100,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``optimizer`` (a class, or a callable ``optimizer(params, **arguments)``) behaves.

    Each property is tried on tensors of shapes (4, 3) and (3,) whose gradients come from a
    fixed convex loss:

    - ``state_round_trip``: after ``steps`` steps, ``state_dict()`` goes through ``torch.save``
      and ``torch.load(weights_only=True)`` into a fresh optimizer on copies of the parameters;
      ``steps`` more steps give bitwise the same parameters as the uninterrupted run.
    - ``per_group_hyperparameters``: a second param group with ``group_overrides`` (default: half
      the default ``lr``) follows an optimizer built with those values (rtol 1e-6), and the
      first group follows the optimizer alone.
    - ``no_grad_untouched``: a parameter whose ``.grad`` is ``None`` stays bitwise the same.
    - ``dtypes``: float32, float64 and bfloat16 parameters keep their dtype and stay finite (and
      float32/float64 ones move).
    - ``non_contiguous``: a transposed (non-contiguous) parameter gets the updates of its
      contiguous copy (rtol 1e-5, atol 1e-6).
    - ``empty_tensors``: parameters of shapes (0,) and (0, 3) among others neither fail nor
      change the others' updates (rtol 1e-6).
    - ``add_param_group``: a group added after ``steps`` steps gets every default and is updated
      as a new optimizer would update it (rtol 1e-6).
    - ``closure``: ``step(closure)`` calls the closure and returns its loss.
    - ``foreach_agrees``: with a ``foreach`` argument, ``True`` and ``False`` agree in float64
      (rtol 1e-9, atol 1e-12); not applicable without one.
    - ``deterministic``: two identical runs are bitwise equal.
    - ``decreases_loss``: ``descent_steps`` steps lower the convex loss.
    - ``evaluation_modes``: for an optimizer with ``train()``/``eval()`` (the evaluation
      contract of :class:`plugtrain.protocols.Optimizer`): it defines both; each is idempotent;
      ``eval()`` then ``train()`` gives the training parameters back; a ``state_dict()`` taken in
      ``eval()`` mode, loaded on the evaluation parameters and followed by ``train()``, continues
      the run (float64, rtol 1e-9); not applicable to an optimizer with neither.

    :param arguments: the optimizer's arguments besides the parameters.
    :param skip: ``{property: reason}`` for properties that do not apply to this optimizer (the
        reason is kept in the report; an unknown property name is an error).
    :param name: how messages name the optimizer (default: its ``__name__``).
    :param raise_on_failure: ``False`` returns the report instead of raising.
    :returns: the outcome of every property.
    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    checks = _OptimizerChecks(optimizer, arguments or {}, steps, group_overrides, descent_steps)
    label = f"optimizer {name or getattr(optimizer, '__name__', repr(optimizer))}"
    properties = {prop: getattr(checks, prop) for prop in OPTIMIZER_PROPERTIES}
    builds = construction(label, lambda: checks.make(_leaves(_start(torch.float32))), arguments)
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure, first=builds)
