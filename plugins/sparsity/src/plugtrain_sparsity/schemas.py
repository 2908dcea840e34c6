"""Argument schemas of the sparsity algorithms and LogSparsity (torch-free: ``check`` reads them).

The fields are each algorithm's constructor arguments, the keys of one ``trainer.init.sparsity``
group besides ``algorithm`` and ``param_filter``. The checks shared by
every algorithm (schedules, ``update``, ``init_method``) come from
:class:`plugtrain.sparsity_schema.SparsitySchema`; each schema adds its own :meth:`rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.hyperparams import (
    ConstantHyperParameter,
    HyperParameterError,
    HyperParameterSchedule,
    UpdateSchedule,
    make_schedule,
)
from plugtrain.schema import Problem, about, arg
from plugtrain.sparsity_schema import (
    SparsitySchema,
    drop_fraction_arg,
    init_method_arg,
    sparsity_arg,
    update_arg,
)

__all__ = ["GMPArgs", "LogSparsityArgs", "RigLArgs", "SETArgs", "StaticArgs"]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _level_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """A constant sparsity (a number) outside [0, 1)."""
    value = arguments["sparsity"]
    if _is_number(value) and not 0.0 <= value < 1.0:
        yield about("sparsity", f"Invalid sparsity level {value}. Must be 0.0 <= s < 1.0")


def _drop_fraction_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """A constant drop_fraction (a number) outside [0, 1]."""
    value = arguments["drop_fraction"]
    if _is_number(value) and not 0.0 <= value <= 1.0:
        message = f"Invalid drop_fraction {value}. Must be 0.0 <= drop_fraction <= 1.0"
        yield about("drop_fraction", message)


@attrs.frozen
class StaticArgs(SparsitySchema):
    """Static sparsity: masks set once at initialisation and never changed."""

    sparsity: float | list[float] | dict[str, Any] = sparsity_arg(
        "fraction of zeros per parameter, a constant in [0, 1)"
    )
    init_method: str | Callable[..., Any] = init_method_arg()

    schedules: ClassVar[tuple[str, ...]] = ()  # checked as a constant by rules

    @staticmethod
    def rules(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Static takes only a constant level in [0, 1)."""
        value = arguments["sparsity"]
        if not _is_number(value):
            message = (
                f"Static sparsity algorithm only supports constant sparsity (a number in "
                f"[0, 1)), got {value!r}; for a schedule use algorithm gmp, set or rigl"
            )
            yield about("sparsity", message)
            return
        yield from _level_problems(arguments)


@attrs.frozen
class GMPArgs(SparsitySchema):
    """Gradual magnitude pruning: at each update step, keep the largest weights to the schedule."""

    sparsity: (
        float | list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]
    ) = sparsity_arg(
        "the scheduled fraction of zeros (not constant): a list or a schedule "
        "{type: linear|exp|power|cosine|cycling, ...}"
    )
    init_method: str | Callable[..., Any] = init_method_arg()
    update: dict[str, Any] | UpdateSchedule | Callable[[int], bool] | None = update_arg()

    update_argument: ClassVar[str | None] = "update"

    @staticmethod
    def rules(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """GMP's sparsity must change over training."""
        value = arguments["sparsity"]
        try:
            schedule = make_schedule(value)
        except HyperParameterError:
            return  # reported by cross_check
        if isinstance(schedule, ConstantHyperParameter):
            message = (
                f"Configured with constant sparsity {schedule.value}. This is not valid, "
                "because the sparsity pattern would not change during training. For a static "
                'sparsity pattern, use `algorithm="static".`'
            )
            yield about("sparsity", message)


@attrs.frozen
class SETArgs(SparsitySchema):
    """Sparse evolutionary training: drop the smallest weights, regrow at random positions."""

    sparsity: (
        float | list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]
    ) = sparsity_arg()
    init_method: str | Callable[..., Any] = init_method_arg()
    update: dict[str, Any] | UpdateSchedule | Callable[[int], bool] | None = update_arg()
    drop_fraction: (
        float | list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]
    ) = drop_fraction_arg()

    schedules: ClassVar[tuple[str, ...]] = ("sparsity", "drop_fraction")
    update_argument: ClassVar[str | None] = "update"

    @staticmethod
    def rules(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Constant levels in range."""
        yield from _level_problems(arguments)
        yield from _drop_fraction_problems(arguments)


@attrs.frozen
class RigLArgs(SparsitySchema):
    """RigL: drop the smallest weights, regrow where the dense gradient is largest."""

    sparsity: (
        float | list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]
    ) = sparsity_arg()
    init_method: str | Callable[..., Any] = init_method_arg()
    update: dict[str, Any] | UpdateSchedule | Callable[[int], bool] | None = update_arg()
    drop_fraction: (
        float | list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]
    ) = drop_fraction_arg()
    balance_in_groups: int | None = arg(
        None, gt=0, help="balance the mask over this many groups of input columns (2-D weights)"
    )
    balance_out_groups: int | None = arg(
        None, gt=0, help="balance the mask over this many groups of output rows"
    )

    schedules: ClassVar[tuple[str, ...]] = ("sparsity", "drop_fraction")
    update_argument: ClassVar[str | None] = "update"

    @staticmethod
    def rules(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Constant levels in range; at most one balance key."""
        yield from _level_problems(arguments)
        yield from _drop_fraction_problems(arguments)
        both = ("balance_in_groups", "balance_out_groups")
        if all(arguments[key] is not None for key in both):
            message = (
                "Only one of `balance_in_groups` and `balance_out_groups` can be specified "
                "at a time."
            )
            yield about(("balance_out_groups", "balance_in_groups"), message)


@attrs.frozen
class LogSparsityArgs:
    """Target and actual sparsity of every sparse parameter into the training metrics."""
