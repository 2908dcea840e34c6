"""``trainer.init.precision``: mixed precision, loss scaling and gradient clipping (torch-free).

The keys, defaults and rules of Model Zoo's ``precision`` section: its ``MixedPrecision``
callback as in the current Cerebras/modelzoo sources (``fp16_type`` bfloat16 by default,
``log_loss_scale`` unset meaning "when dynamic"), and cstorch's bounds for dynamic loss
scaling. :mod:`plugtrain.train.loop.precision` runs them: ``torch.autocast`` for the forward pass
and the loss, a ``torch.amp.GradScaler`` for ``float16``, clipping after unscaling.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from plugtrain.registry.schema import Problem, about, arg

__all__ = ["MIN_DYNAMIC_LOSS_SCALE", "PrecisionSettings"]

MIN_DYNAMIC_LOSS_SCALE = 2.0**-14
"""The smallest ``min_loss_scale`` cstorch's dynamic loss scaling accepts."""


@attrs.frozen
class PrecisionSettings:
    """Mixed precision, loss scaling and gradient clipping (Model Zoo's ``precision``).

    ``enabled`` turns autocast (and, for ``float16``, loss scaling) on; clipping applies either
    way. ``bfloat16`` needs no loss scaling, so the scaling keys are inert with it.
    """

    enabled: bool = arg(True, help="run the forward pass and the loss under autocast")
    fp16_type: Literal["float16", "bfloat16", "cbfloat16"] = arg(
        "bfloat16",
        help="the half type: float16 (with a loss scaler), bfloat16, or cbfloat16 (CSX only; "
        "bfloat16 elsewhere)",
    )
    precision_opt_level: int | None = arg(
        None,
        choices=(None, 0, 1, 2),
        help="the CSX compiler's precision optimization level (handed to the CSX backend; "
        "no effect elsewhere)",
    )
    loss_scaling_factor: float | Literal["dynamic"] | None = arg(
        1.0,
        gt=0,
        help="float16: a fixed loss scale, or 'dynamic' for dynamic loss scaling",
    )
    initial_loss_scale: float | None = arg(
        None, gt=0, help="dynamic: the first loss scale (None: 65536, torch's default)"
    )
    steps_per_increase: int = arg(
        2000, gt=0, help="dynamic: double the loss scale after this many steps without overflow"
    )
    min_loss_scale: float | None = arg(
        None, gt=0, help="dynamic: the loss scale never backs off below this"
    )
    max_loss_scale: float | None = arg(
        None, gt=0, help="dynamic: the loss scale never grows past this"
    )
    max_gradient_norm: float | None = arg(
        None, gt=0, help="clip the gradients to this total L2 norm (after unscaling)"
    )
    max_gradient_value: float | None = arg(
        None, gt=0, help="clip each gradient element to [-value, value] (after unscaling)"
    )
    log_loss_scale: bool | None = arg(
        None,
        help="put loss_scale in the metrics (None: when loss_scaling_factor is dynamic)",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """Model Zoo's rules: one kind of clipping; sane dynamic loss-scale bounds."""
        by_norm, by_value = arguments["max_gradient_norm"], arguments["max_gradient_value"]
        if by_norm is not None and by_value is not None:
            yield about(
                ("max_gradient_value", "max_gradient_norm"),
                "gradients are clipped by norm (max_gradient_norm) or by value "
                "(max_gradient_value), not both: give one of them",
            )
        low, high = arguments["min_loss_scale"], arguments["max_loss_scale"]
        if low is not None and high is not None and low > high:
            yield about(
                ("min_loss_scale", "max_loss_scale"),
                f"min_loss_scale ({low:g}) must not exceed max_loss_scale ({high:g})",
            )
        dynamic = arguments["loss_scaling_factor"] == "dynamic"
        if dynamic and low is not None and low < MIN_DYNAMIC_LOSS_SCALE:
            yield about(
                "min_loss_scale",
                f"min_loss_scale must be >= 2**-14 ({MIN_DYNAMIC_LOSS_SCALE:g}) with dynamic "
                f"loss scaling, got {low:g}",
            )

    @property
    def dynamic(self) -> bool:
        """Whether the loss scale is dynamic."""
        return self.loss_scaling_factor == "dynamic"

    def half_type(self, on_csx: bool) -> str | None:
        """The autocast type on this backend: ``None`` when disabled; cbfloat16 only on CSX."""
        if not self.enabled:
            return None
        if self.fp16_type == "cbfloat16" and not on_csx:
            return "bfloat16"
        return self.fp16_type
