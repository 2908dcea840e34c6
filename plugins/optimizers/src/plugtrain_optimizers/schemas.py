"""Argument schemas of the optimizers (torch-free: ``plugtrain check`` imports only this).

Defaults are cstorch 2.10's; ``foreach`` (and ``fused`` for Adam/AdamW) pick a code path and
never change the numbers beyond rounding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.schema import Problem, about, arg


def _lr(default: Any = ...) -> Any:
    if default is ...:
        return arg(help="learning rate", ge=0, aliases=("learning_rate",))
    return arg(default, help="learning rate", ge=0, aliases=("learning_rate",))


def _betas(default: tuple[float, float], what: str = "moment") -> Any:
    return arg(default, help=f"decay rates of the {what} averages", ge=0, lt=1)


def _eps(default: float) -> Any:
    return arg(default, help="term added for numerical stability", ge=0)


def _wd(help: str = "L2 penalty added to the gradient") -> Any:  # noqa: A002
    return arg(0.0, help=help, ge=0)


def _maximize() -> Any:
    return arg(False, help="maximize the objective instead of minimizing it")


def _foreach() -> Any:
    return arg(None, help="multi-tensor (foreach) path; None or True: yes, False: per tensor")


def _flat() -> Any:
    return arg(
        None,
        help=(
            "keep each param group's parameters, gradients and state in one buffer per device "
            "and dtype (faster with many small tensors); None: where that changes nothing "
            "observable (groups of small tensors that share their storage with nothing)"
        ),
    )


def _fused() -> Any:
    return arg(None, help="torch's fused Adam kernel; None: where it gives the same numbers")


@attrs.frozen
class SGDArgs:
    """Stochastic gradient descent with momentum, dampening from the first step (cstorch).

    ``buf = momentum * buf + (1 - dampening) * g`` with ``buf`` starting at zero, L2
    ``weight_decay`` added to the gradient, optional Nesterov momentum.
    """

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr()
    momentum: float = arg(0.0, help="momentum factor", ge=0)
    dampening: float = arg(0.0, help="dampening of the momentum", ge=0)
    weight_decay: float = _wd()
    nesterov: bool = arg(False, help="use Nesterov momentum (needs momentum > 0, dampening 0)")
    maximize: bool = _maximize()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """Nesterov momentum needs a positive momentum and zero dampening."""
        if arguments["nesterov"] and (arguments["momentum"] <= 0 or arguments["dampening"] != 0):
            message = (
                "nesterov=True needs momentum > 0 and dampening = 0, got "
                f"momentum={arguments['momentum']!r}, dampening={arguments['dampening']!r}"
            )
            yield about(("nesterov", "momentum", "dampening"), message)


@attrs.frozen
class AdamArgs:
    """Adam with cstorch numerics: eps on the uncorrected sqrt(v), then bias correction.

    ``weight_decay`` is an L2 penalty on the gradient, kept in the group as
    ``l2_regularization_rate``; the group's ``weight_decay`` starts at 0 and acts as decoupled
    decay (as in AdamW) when a weight-decay scheduler writes it.
    """

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "correct_bias": "Adam always corrects the bias; Model Zoo accepts correct_bias on Adam "
        "and ignores it (AdamW's correct_bias does act)",
    }

    lr: float = _lr(1e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-6)
    weight_decay: float = _wd()
    amsgrad: bool = arg(False, help="keep the running maximum of the second moment")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()
    fused: bool | None = _fused()


@attrs.frozen
class AdamWArgs:
    """AdamW with cstorch numerics: decoupled weight decay, optional bias correction."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-6)
    weight_decay: float = _wd("decoupled weight decay: p -= lr * weight_decay * p")
    correct_bias: bool = arg(True, help="apply the bias correction of both moments")
    amsgrad: bool = arg(False, help="keep the running maximum of the second moment")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()
    fused: bool | None = _fused()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The fused kernel (torch's) always corrects the bias."""
        if arguments["fused"] and not arguments["correct_bias"]:
            message = "fused=True needs correct_bias=True (torch's kernel always corrects the bias)"
            yield about(("fused", "correct_bias"), message)


@attrs.frozen
class AdamaxArgs:
    """Adamax (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-6)
    weight_decay: float = _wd()
    maximize: bool = _maximize()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class AdadeltaArgs:
    """Adadelta (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1.0)
    rho: float = arg(0.9, help="decay rate of the squared averages", ge=0, le=1)
    eps: float = _eps(1e-6)
    weight_decay: float = _wd()
    maximize: bool = _maximize()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class AdagradArgs:
    """Adagrad (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(0.01)
    lr_decay: float = arg(0.0, help="learning-rate decay: lr / (1 + (t - 1) * lr_decay)", ge=0)
    weight_decay: float = _wd()
    initial_accumulator_value: float = arg(0.0, help="start of the sum of squares", ge=0)
    eps: float = _eps(1e-6)
    maximize: bool = _maximize()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class ASGDArgs:
    """Averaged SGD (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(0.01)
    lambd: float = arg(1e-4, help="decay term", ge=0)
    alpha: float = arg(0.75, help="power of the eta update", ge=0)
    t0: float = arg(1e6, help="step at which averaging starts", ge=0)
    weight_decay: float = _wd()
    maximize: bool = _maximize()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class NAdamArgs:
    """NAdam with cstorch's momentum-term denominator ``1 - mu_product * mu_t * mu_{t+1}``."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(2e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-8)
    weight_decay: float = _wd()
    momentum_decay: float = arg(4e-3, help="momentum decay psi", ge=0)
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class RAdamArgs:
    """Rectified Adam (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-6)
    weight_decay: float = _wd()
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class RMSpropArgs:
    """RMSprop (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(0.01)
    alpha: float = arg(0.99, help="smoothing constant", ge=0, le=1)
    eps: float = _eps(1e-8)
    weight_decay: float = _wd()
    momentum: float = arg(0.0, help="momentum factor", ge=0)
    centered: bool = arg(False, help="normalise by the estimated variance of the gradient")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class RpropArgs:
    """Resilient backpropagation (torch's update rule, cstorch defaults)."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1e-3)
    etas: tuple[float, float] = arg((0.5, 1.2), help="(decrease, increase) factors", gt=0)
    step_sizes: tuple[float, float] = arg((1e-6, 50.0), help="(minimal, maximal) step", ge=0)
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The etas must straddle 1 and the step sizes must be ordered."""
        minus, plus = arguments["etas"]
        if not minus < 1 < plus:
            message = f"etas must satisfy 0 < etaminus < 1 < etaplus, got {arguments['etas']!r}"
            yield about("etas", message)
        low, high = arguments["step_sizes"]
        if low > high:
            message = f"step_sizes must be (minimal, maximal), got {arguments['step_sizes']!r}"
            yield about("step_sizes", message)


@attrs.frozen
class LambArgs:
    """Lamb as cstorch computes it: no bias correction, trust ratio clamp(|p|, 0, 10) / |r|."""

    lr: float = _lr(1e-3)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-6)
    weight_decay: float = _wd("weight decay added to the Adam ratio before the trust ratio")
    adam: bool = arg(False, help="use a trust ratio of 1 (plain Adam-style update)")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class LionArgs:
    """Lion: sign of an interpolated momentum, decoupled weight decay."""

    supports_sharded_params: ClassVar[bool] = True  # element-wise: steps on FSDP2 shards

    lr: float = _lr(1e-4)
    betas: tuple[float, float] = _betas((0.9, 0.99))
    weight_decay: float = _wd("decoupled weight decay: p *= 1 - lr * weight_decay")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class AdafactorArgs:
    """Adafactor as cstorch supports it (factored second moment, update clipping at 1)."""

    lr: float = _lr()
    eps: tuple[float, float] = arg((1e-30, 1e-3), help="(added to g^2, floor of RMS(p))", ge=0)
    clip_threshold: float = arg(1.0, help="update clipping threshold (only 1.0)", gt=0)
    decay_rate: float = arg(-0.8, help="beta2_t = 1 - t ** decay_rate", le=0)
    beta1: float | None = arg(None, help="first-moment decay (only None)")
    weight_decay: float = _wd("decoupled weight decay, scaled by the relative step")
    scale_parameter: bool = arg(True, help="scale the step by RMS(p)")
    relative_step: bool = arg(False, help="time-dependent learning rate (only False)")
    warmup_init: bool = arg(False, help="warm-up initialisation (only False)")
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The options cstorch's Adafactor does not support."""
        unsupported = (
            ("beta1", None),
            ("clip_threshold", 1.0),
            ("relative_step", False),
            ("warmup_init", False),
        )
        for name, only in unsupported:
            if arguments[name] != only:
                message = f"Adafactor supports only {name}={only!r}, got {name}={arguments[name]!r}"
                yield about(name, message)


@attrs.frozen
class MuonArgs:
    """Muon: momentum orthogonalised by Newton-Schulz, lr scaled by 0.2 * sqrt(max(rows, cols)).

    Parameters with fewer than 2 dimensions take the ``fallback`` (AdamW with ``fallback_betas``,
    ``fallback_eps``, the group's lr and weight decay); with ``fallback=None`` they are an error.
    """

    lr: float = _lr(0.02)
    weight_decay: float = arg(0.01, help="decoupled weight decay: p *= 1 - lr * wd", ge=0)
    momentum: float = arg(0.95, help="momentum factor", ge=0, lt=1)
    nesterov: bool = arg(True, help="use Nesterov momentum")
    ns_steps: int = arg(5, help="Newton-Schulz iterations", ge=1)
    ns_dtype: str = arg(
        "bfloat16",
        help=(
            "precision of the Newton-Schulz iterations: bfloat16 (as torch.optim.Muon) or "
            "float32 (float64 parameters stay float64)"
        ),
        choices=("float32", "bfloat16"),
    )
    fallback: str | None = arg(
        "adamw", help="update of 0-D/1-D parameters", choices=("adamw", None)
    )
    fallback_betas: tuple[float, float] = _betas((0.9, 0.95), "fallback AdamW moment")
    fallback_eps: float = _eps(1e-8)
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """Nesterov momentum needs a positive momentum."""
        if arguments["nesterov"] and arguments["momentum"] <= 0:
            message = f"nesterov=True needs momentum > 0, got momentum={arguments['momentum']!r}"
            yield about(("nesterov", "momentum"), message)


@attrs.frozen
class AdamWScheduleFreeArgs:
    """Schedule-Free AdamW (Defazio et al. 2024; Meta's ``schedulefree`` argument names).

    No learning-rate schedule is needed: the optimizer trains at ``y``, an interpolation of the
    averaged iterate ``x`` and the base iterate ``z``, and evaluates (``eval()``) at ``x``.
    """

    lr: float = _lr(0.0025)
    betas: tuple[float, float] = _betas((0.9, 0.999))
    eps: float = _eps(1e-8)
    weight_decay: float = _wd("L2 penalty, computed at y and added to the normalized gradient")
    warmup_steps: int = arg(0, help="steps of linear learning-rate warmup", ge=0)
    r: float = arg(0.0, help="polynomial weighting of the average: weight (k+1)^r", ge=0)
    weight_lr_power: float = arg(2.0, help="the average weights steps by lr_max ** this", ge=0)
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()


@attrs.frozen
class SGDScheduleFreeArgs:
    """Schedule-Free SGD (Defazio et al. 2024; Meta's ``schedulefree`` argument names)."""

    lr: float = _lr(0.0025)
    momentum: float = arg(0.9, help="interpolation between x and z (beta)", gt=0, lt=1)
    weight_decay: float = _wd("L2 penalty, computed at y and added to the gradient")
    warmup_steps: int = arg(0, help="steps of linear learning-rate warmup", ge=0)
    r: float = arg(0.0, help="polynomial weighting of the average: weight (k+1)^r", ge=0)
    weight_lr_power: float = arg(2.0, help="the average weights steps by lr_max ** this", ge=0)
    foreach: bool | None = _foreach()
    flat: bool | None = _flat()
