"""Learning-rate schedulers: each is its schema plus the shared machinery of ``Scheduler``.

Positional and keyword arguments follow the schema (see ``plugtrain show NAME``); every one
also takes ``param_group_tags``.
"""

from __future__ import annotations

from plugtrain.scheduler import Scheduler
from plugtrain_schedulers import schemas
from plugtrain_schedulers._wrappers import Chained, ScalePerParam, Sequential

__all__ = [
    "ChainedLR",
    "ConstantLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "CosineDecayLR",
    "CyclicLR",
    "ExponentialLR",
    "InverseExponentialTimeDecayLR",
    "InverseSquareRootDecayLR",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "MultiplicativeLR",
    "OneCycleLR",
    "PiecewiseConstantLR",
    "PolynomialLR",
    "ScalePerParamLR",
    "SequentialLR",
    "StepLR",
]


class ConstantLR(Scheduler):
    """Holds the learning rate at ``learning_rate``."""

    schema = schemas.ConstantLRArgs


class PolynomialLR(Scheduler):
    """Decays the learning rate polynomially from ``initial_learning_rate`` to the end value."""

    schema = schemas.PolynomialLRArgs


class LinearLR(Scheduler):
    """Ramps the learning rate linearly from ``initial_learning_rate`` to ``end_learning_rate``."""

    schema = schemas.LinearLRArgs


class ExponentialLR(Scheduler):
    """Multiplies the learning rate by ``decay_rate`` per ``total_iters`` steps (or in stairs)."""

    schema = schemas.ExponentialLRArgs


class InverseExponentialTimeDecayLR(Scheduler):
    """Decays the learning rate as ``a / (1 + decay_rate * e ** step_exponent / T)``."""

    schema = schemas.InverseExponentialTimeDecayLRArgs


class InverseSquareRootDecayLR(Scheduler):
    """Decays the learning rate as ``a * scale / sqrt(max(warmup_steps, e))``."""

    schema = schemas.InverseSquareRootDecayLRArgs


class CosineDecayLR(Scheduler):
    """Decays the learning rate along half a cosine, then holds ``end_learning_rate``."""

    schema = schemas.CosineDecayLRArgs


class CosineAnnealingLR(Scheduler):
    """Anneals the learning rate along a cosine of period ``2 * T_max`` (torch's closed form)."""

    schema = schemas.CosineAnnealingLRArgs


class CosineAnnealingWarmRestarts(Scheduler):
    """Cosine annealing restarted after ``T_0``, ``T_0 * T_mult``, ... steps (torch's SGDR)."""

    schema = schemas.CosineAnnealingWarmRestartsLRArgs


class MultiStepLR(Scheduler):
    """Multiplies the learning rate by ``gamma`` at each milestone."""

    schema = schemas.MultiStepLRArgs


class StepLR(Scheduler):
    """Multiplies the learning rate by ``gamma`` every ``step_size`` steps."""

    schema = schemas.StepLRArgs


class MultiplicativeLR(Scheduler):
    """Multiplies the learning rate by ``coefficient`` every step."""

    schema = schemas.MultiplicativeLRArgs


class LambdaLR(Scheduler):
    """Sets the learning rate to ``initial_learning_rate * lr_lambda(e)`` for a Python callable."""

    schema = schemas.LambdaLRArgs


class CyclicLR(Scheduler):
    """Cycles the learning rate between ``base_lr`` and ``max_lr`` (torch's CyclicLR wave)."""

    schema = schemas.CyclicLRArgs


class OneCycleLR(Scheduler):
    """The 1cycle policy up to ``max_lr``; ``initial_learning_rate`` is max_lr / div_factor."""

    schema = schemas.OneCycleLRArgs


class PiecewiseConstantLR(Scheduler):
    """Holds ``learning_rates[i]`` between milestones ``i - 1`` and ``i``."""

    schema = schemas.PiecewiseConstantLRArgs


class SequentialLR(Sequential):
    """Runs learning-rate schedulers one after another, switching at ``milestones``."""

    schema = schemas.SequentialLRArgs


class ChainedLR(Chained):
    """Multiplies learning-rate schedulers: ``v_0(e) * prod_i v_i(e) / v_i(0)``."""

    schema = schemas.ChainedLRArgs


class ScalePerParamLR(ScalePerParam):
    """Scales another scheduler's learning rate by each group's ``adjust_learning_rate``.

    A group without it is scaled by its ``adjust_val``, else by 1 (cstorch's factors).
    """

    schema = schemas.ScalePerParamLRArgs
