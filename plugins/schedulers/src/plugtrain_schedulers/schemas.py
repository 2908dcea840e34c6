"""Argument schemas of the schedulers (torch-free: ``plugtrain check`` imports only this).

Each learning-rate schema below is written out; its weight-decay twin is derived from it by
:func:`~plugtrain_schedulers._schema_base.weight_decay_twin` (seed names such as
``initial_weight_decay``, cstorch aliases such as ``initial_val``). ``curve`` gives each
schedule's closed form from :mod:`plugtrain_schedulers.curves`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.curve import Curve
from plugtrain.scheduler import ChildCurve, ParamGroupTags, ScheduleSchema, Show, tags_arg
from plugtrain.schema import Problem, about, arg
from plugtrain_schedulers import curves
from plugtrain_schedulers._schema_base import weight_decay_twin

__all__ = ["LR_SCHEMAS", "WD_SCHEMAS"]

Spec = Any  # a nested scheduler: {Name: {arguments}} or a built scheduler


def _increasing(values: Iterable[int], key: str, show: Show) -> Iterable[Problem]:
    marks = list(values)
    if any(b <= a for a, b in itertools.pairwise(marks)):
        yield about(show(key), f"{show(key)} must be strictly increasing, got {marks!r}")


@attrs.frozen
class ConstantLRArgs(ScheduleSchema):
    """Constant learning rate: ``lr(e) = learning_rate``."""

    learning_rate: float = arg(help="the learning rate", ge=0)
    total_iters: int | None = arg(None, help="length when used inside a SequentialLR", gt=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Constant."""
        return curves.constant(arguments["learning_rate"], arguments["total_iters"])


@attrs.frozen
class PolynomialLRArgs(ScheduleSchema):
    """Polynomial decay: ``lr(e) = (a - b) (1 - e / T) ** power + b`` for ``e < T``, then ``b``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    end_learning_rate: float = arg(help="learning rate from step total_iters on", ge=0)
    total_iters: int = arg(help="number of steps of the decay", gt=0)
    power: float = arg(1.0, help="exponent of the decay (1: linear)", ge=0)
    cycle: bool = arg(False, help="restart the decay every total_iters steps")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Polynomial decay."""
        return curves.polynomial(
            arguments["initial_learning_rate"],
            arguments["end_learning_rate"],
            arguments["total_iters"],
            arguments["power"],
            arguments["cycle"],
        )


@attrs.frozen
class LinearLRArgs(ScheduleSchema):
    """Linear ramp: ``lr(e) = (a - b) (1 - e / T) + b`` for ``e < T``, then ``b``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    end_learning_rate: float = arg(help="learning rate from step total_iters on", ge=0)
    total_iters: int = arg(help="number of steps of the ramp", gt=0)
    cycle: bool = arg(False, help="restart the ramp every total_iters steps")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Linear ramp."""
        return curves.polynomial(
            arguments["initial_learning_rate"],
            arguments["end_learning_rate"],
            arguments["total_iters"],
            1.0,
            arguments["cycle"],
        )


@attrs.frozen
class ExponentialLRArgs(ScheduleSchema):
    """Exponential decay: ``lr(e) = a * decay_rate ** (e / T)`` (floored under staircase)."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    total_iters: int = arg(help="steps per factor of decay_rate", gt=0)
    decay_rate: float = arg(help="factor per total_iters steps", ge=0)
    staircase: bool = arg(False, help="decay in whole steps of total_iters")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Exponential decay."""
        return curves.exponential(
            arguments["initial_learning_rate"],
            arguments["total_iters"],
            arguments["decay_rate"],
            arguments["staircase"],
        )


@attrs.frozen
class InverseExponentialTimeDecayLRArgs(ScheduleSchema):
    """Inverse time decay: ``lr(e) = a / (1 + decay_rate * e ** step_exponent / T)``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    step_exponent: float = arg(help="exponent applied to the step", ge=0)
    total_iters: int = arg(help="steps per unit of decay", gt=0)
    decay_rate: float = arg(help="decay rate", ge=0)
    staircase: bool = arg(False, help="floor e ** step_exponent / T")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Inverse time decay."""
        return curves.inverse_exponential_time_decay(
            arguments["initial_learning_rate"],
            arguments["step_exponent"],
            arguments["total_iters"],
            arguments["decay_rate"],
            arguments["staircase"],
        )


@attrs.frozen
class InverseSquareRootDecayLRArgs(ScheduleSchema):
    """Inverse square root decay: ``lr(e) = a * scale / sqrt(max(warmup_steps, e))``."""

    initial_learning_rate: float = arg(1.0, help="learning rate numerator", ge=0)
    scale: float = arg(1.0, help="multiplies the result", ge=0)
    warmup_steps: float = arg(1.0, help="steps the value is held for", gt=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Inverse square root decay."""
        return curves.inverse_square_root_decay(
            arguments["initial_learning_rate"], arguments["scale"], arguments["warmup_steps"]
        )


@attrs.frozen
class CosineDecayLRArgs(ScheduleSchema):
    """Cosine decay: ``lr(e) = b + (a - b) (1 + cos(pi min(e, T) / T)) / 2``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    end_learning_rate: float = arg(help="learning rate from step total_iters on", ge=0)
    total_iters: int = arg(help="number of steps of the decay", gt=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Cosine decay."""
        return curves.cosine_decay(
            arguments["initial_learning_rate"],
            arguments["end_learning_rate"],
            arguments["total_iters"],
        )


@attrs.frozen
class CosineAnnealingLRArgs(ScheduleSchema):
    """Cosine annealing: ``lr(e) = eta_min + (a - eta_min) (1 + cos(pi e / T_max)) / 2``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    T_max: int = arg(help="steps from the maximum to the minimum", gt=0)
    eta_min: float = arg(0.0, help="minimum learning rate", ge=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Cosine annealing (periodic)."""
        return curves.cosine_annealing(
            arguments["initial_learning_rate"], arguments["T_max"], arguments["eta_min"]
        )


@attrs.frozen
class CosineAnnealingWarmRestartsLRArgs(ScheduleSchema):
    """Cosine annealing with warm restarts after T_0, T_0 T_mult, ... steps (torch's SGDR)."""

    initial_learning_rate: float = arg(help="learning rate at each restart", ge=0)
    T_0: int = arg(help="steps of the first period", gt=0)
    T_mult: int = arg(1, help="growth factor of the periods", ge=1)
    eta_min: float = arg(0.0, help="minimum learning rate", ge=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Cosine with warm restarts."""
        return curves.cosine_annealing_warm_restarts(
            arguments["initial_learning_rate"],
            arguments["T_0"],
            arguments["T_mult"],
            arguments["eta_min"],
        )


@attrs.frozen
class MultiStepLRArgs(ScheduleSchema):
    """Step decay at milestones: ``lr(e) = a * gamma ** (number of milestones <= e)``.

    Milestones may come in any order and repeat (torch's and cstorch's counting): ``[4, 4, 8]``
    applies gamma twice at step 4.
    """

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    gamma: float = arg(help="factor applied at each milestone", ge=0)
    milestones: list[int] = arg(help="steps where gamma applies (any order; repeats count)", ge=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Multi-step decay."""
        return curves.multi_step(
            arguments["initial_learning_rate"], arguments["gamma"], arguments["milestones"]
        )


@attrs.frozen
class StepLRArgs(ScheduleSchema):
    """Step decay: ``lr(e) = a * gamma ** floor(e / step_size)``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    step_size: int = arg(help="steps between decays", gt=0)
    gamma: float = arg(help="factor applied every step_size steps", ge=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Step decay."""
        return curves.step(
            arguments["initial_learning_rate"], arguments["step_size"], arguments["gamma"]
        )


@attrs.frozen
class MultiplicativeLRArgs(ScheduleSchema):
    """Multiplicative decay: ``lr(e) = a * coefficient ** e``."""

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    coefficient: float = arg(help="factor applied every step", ge=0)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Multiplicative decay."""
        return curves.multiplicative(arguments["initial_learning_rate"], arguments["coefficient"])


@attrs.frozen
class LambdaLRArgs(ScheduleSchema):
    """A Python function of the step: ``lr(e) = a * lr_lambda(e)`` (from Python only)."""

    initial_learning_rate: float = arg(help="learning rate multiplied by lr_lambda(e)", ge=0)
    lr_lambda: Callable[[int], float] = arg(help="factor as a function of the step")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Scaled Python function."""
        return curves.lambda_curve(arguments["initial_learning_rate"], arguments["lr_lambda"])


@attrs.frozen
class CyclicLRArgs(ScheduleSchema):
    """Cyclical learning rate between base_lr and max_lr (torch's CyclicLR wave)."""

    base_lr: float = arg(help="lower boundary of the cycle", ge=0)
    max_lr: float = arg(help="upper boundary of the cycle", ge=0)
    step_size_up: int = arg(2000, help="steps of the rising half", gt=0)
    step_size_down: int | None = arg(None, help="steps of the falling half (None: up)", gt=0)
    mode: str = arg(
        "triangular", help="amplitude policy", choices=("triangular", "triangular2", "exp_range")
    )
    gamma: float = arg(1.0, help="exp_range factor: gamma ** x", gt=0)
    scale_mode: str | None = arg(
        None,
        help="x is the cycle number or the step (None: the step for exp_range, else the cycle)",
        choices=("cycle", "iterations", None),
    )
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Cyclic wave."""
        return curves.cyclic(
            arguments["base_lr"],
            arguments["max_lr"],
            arguments["step_size_up"],
            arguments["step_size_down"],
            arguments["mode"],
            arguments["gamma"],
            arguments["scale_mode"],
        )


@attrs.frozen
class OneCycleLRArgs(ScheduleSchema):
    """The 1cycle policy: initial -> max -> initial / final_div_factor, then held."""

    initial_learning_rate: float = arg(
        help="learning rate at step 0 (torch: max_lr/div_factor)", ge=0
    )
    max_lr: float = arg(help="peak learning rate", ge=0, aliases=("max_learning_rate",))
    total_steps: int = arg(1000, help="steps of the whole cycle", gt=0)
    pct_start: float = arg(0.3, help="fraction of the steps spent rising", gt=0, lt=1)
    final_div_factor: float = arg(1e4, help="final value is initial / final_div_factor", gt=0)
    three_phase: bool = arg(False, help="fall back to initial before the final anneal")
    anneal_strategy: str = arg("cos", help="shape of each phase", choices=("cos", "linear"))
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """1cycle."""
        return curves.one_cycle(
            arguments["initial_learning_rate"],
            arguments["max_lr"],
            arguments["total_steps"],
            arguments["pct_start"],
            arguments["final_div_factor"],
            arguments["three_phase"],
            arguments["anneal_strategy"],
        )

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[Problem]:
        """Every phase lasts at least one step."""
        rise = arguments["pct_start"] * arguments["total_steps"] - 1
        last = arguments["total_steps"] - 1
        top = 2 * rise if arguments["three_phase"] else rise
        if not 0 < rise <= top < last:
            message = (
                f"pct_start={arguments['pct_start']!r} with total_steps="
                f"{arguments['total_steps']!r} leaves a phase without steps"
            )
            yield about(("pct_start", "total_steps", "three_phase"), message)


@attrs.frozen
class SequentialLRArgs(ScheduleSchema):
    """One scheduler after another: child i runs from milestone i - 1 (from step 0 on its own)."""

    schedulers: list[Any] = arg(help="the schedulers, in order", component="scheduler", many=True)
    milestones: list[int] | None = arg(
        None,
        help="steps where the next scheduler starts (None: running totals of total_iters)",
        ge=1,
    )
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Sequence of child curves."""
        children = [child_curve(spec) for spec in arguments["schedulers"]]
        return curves.sequential(children, arguments["milestones"])

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[Problem]:
        """One milestone between each pair of children, increasing."""
        count = len(arguments["schedulers"])
        if count == 0:
            yield about("schedulers", "schedulers must list at least one scheduler")
        milestones = arguments["milestones"]
        if milestones is not None:
            if len(milestones) != count - 1:
                message = (
                    f"milestones needs one entry fewer than schedulers ({count - 1}), "
                    f"got {len(milestones)}"
                )
                yield about(("milestones", "schedulers"), message)
            yield from _increasing(milestones, "milestones", show)


@attrs.frozen
class PiecewiseConstantLRArgs(ScheduleSchema):
    """Constant pieces: ``lr(e) = learning_rates[number of milestones <= e]``."""

    learning_rates: list[float] = arg(help="one value per piece", ge=0)
    milestones: list[int] = arg(help="steps where the next piece starts", ge=1)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Piecewise constant."""
        return curves.piecewise_constant(arguments["learning_rates"], arguments["milestones"])

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[Problem]:
        """One more value than milestones, milestones increasing."""
        values, milestones = arguments["learning_rates"], arguments["milestones"]
        if len(values) != len(milestones) + 1:
            message = (
                f"{show('learning_rates')} needs one more entry than milestones "
                f"({len(milestones) + 1}), got {len(values)}"
            )
            yield about((show("learning_rates"), "milestones"), message)
        yield from _increasing(milestones, "milestones", show)


@attrs.frozen
class ChainedLRArgs(ScheduleSchema):
    """Schedulers applied together: ``v_0(e) * prod_i v_i(e) / v_i(0)``."""

    schedulers: list[Any] = arg(help="the schedulers to chain", component="scheduler", many=True)
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """Product of child curves."""
        return curves.chained([child_curve(spec) for spec in arguments["schedulers"]])

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[Problem]:
        """At least one child."""
        if not arguments["schedulers"]:
            yield about("schedulers", "schedulers must list at least one scheduler")


@attrs.frozen
class ScalePerParamLRArgs(ScheduleSchema):
    """Another scheduler's value times each group's ``adjust_learning_rate`` or ``adjust_val``."""

    nestable: ClassVar[bool] = False  # only the outermost scheduler scales per group
    applies_group_factors: ClassVar[bool] = True

    scheduler: Any = arg(help="the scheduler whose value is scaled", component="scheduler")
    param_group_tags: ParamGroupTags = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """The inner curve (the per-group factors are applied by the scheduler)."""
        return child_curve(arguments["scheduler"])


LR_SCHEMAS: dict[str, type[ScheduleSchema]] = {
    "ConstantLR": ConstantLRArgs,
    "PolynomialLR": PolynomialLRArgs,
    "LinearLR": LinearLRArgs,
    "ExponentialLR": ExponentialLRArgs,
    "InverseExponentialTimeDecayLR": InverseExponentialTimeDecayLRArgs,
    "InverseSquareRootDecayLR": InverseSquareRootDecayLRArgs,
    "CosineDecayLR": CosineDecayLRArgs,
    "CosineAnnealingLR": CosineAnnealingLRArgs,
    "CosineAnnealingWarmRestarts": CosineAnnealingWarmRestartsLRArgs,
    "MultiStepLR": MultiStepLRArgs,
    "StepLR": StepLRArgs,
    "MultiplicativeLR": MultiplicativeLRArgs,
    "LambdaLR": LambdaLRArgs,
    "CyclicLR": CyclicLRArgs,
    "OneCycleLR": OneCycleLRArgs,
    "SequentialLR": SequentialLRArgs,
    "PiecewiseConstantLR": PiecewiseConstantLRArgs,
    "ChainedLR": ChainedLRArgs,
    "ScalePerParamLR": ScalePerParamLRArgs,
}
"""Every learning-rate scheduler name and its schema."""


def wd_name(lr_name: str) -> str:
    """The weight-decay twin's name: ``CosineDecayLR`` -> ``CosineDecayWD``."""
    if lr_name == "CosineAnnealingWarmRestarts":
        return "CosineAnnealingWarmRestartsWD"
    return lr_name.removesuffix("LR") + "WD"


WD_SCHEMAS: dict[str, type[ScheduleSchema]] = {
    wd_name(name): weight_decay_twin(schema, wd_name(name).removesuffix("WD") + "WDArgs")
    for name, schema in LR_SCHEMAS.items()
}
"""Every weight-decay scheduler name and its schema (derived from the learning-rate ones)."""

# The factors' group keys are cstorch's for both kinds, so this text is not renamed.
WD_SCHEMAS["ScalePerParamWD"].__doc__ = ScalePerParamLRArgs.__doc__

# Importable by name, like the hand-written schemas (``schemas.CosineDecayWDArgs``).
globals().update({schema.__name__: schema for schema in WD_SCHEMAS.values()})
