"""Running ``trainer.init.precision``: autocast, the loss scaler and gradient clipping.

One :class:`Precision` per Trainer. Each optimizer step goes::

    with precision.autocast(): loss = loss_fn(model(inputs), targets)   # per micro-batch
    precision.backward(loss)                                             # scaled for float16
    problem = precision.step(optimizer, before_step)  # unscale, clip, before_step(), step

How it behaves, and where it departs from Model Zoo's ``MixedPrecision`` callback:

- ``torch.autocast(device_type, dtype)`` covers the forward pass and the loss, in training and
  in evaluation, on CPU and GPU. ``float16`` runs as float16 on CPU too (torch's CPU autocast
  supports it; Model Zoo falls back to bfloat16 there). ``cbfloat16`` exists only on CSX and is
  bfloat16 elsewhere. On CSX the backend's compiler does the casting (no autocast here).
- ``float16`` gets a ``torch.amp.GradScaler``: ``loss_scaling_factor: dynamic`` scales
  dynamically (first scale ``initial_loss_scale``, default 65536; doubled after
  ``steps_per_increase`` steps without overflow; halved on an overflow) within
  ``[min_loss_scale, max_loss_scale]``, which GradScaler itself does not have and this module
  enforces after each update. A number is a fixed scale (an overflow skips that step, the scale
  stays). ``bfloat16`` needs no scaler; the scaling keys are then inert (said once).
- Clipping (``max_gradient_norm``: :func:`torch.nn.utils.clip_grad_norm_`,
  ``max_gradient_value``: :func:`torch.nn.utils.clip_grad_value_`) runs once per optimizer step,
  after the gradients are accumulated and unscaled, over every parameter of the optimizer.
  Under DDP the gradients are already averaged over the processes when ``backward`` returns,
  so the norm is the global one and the same on every process.
- Non-finite values and ``loop.nan_policy``: a step whose scaled gradients overflow is skipped
  by the scaler and the scale backs off: that is dynamic loss scaling at work and no concern of
  ``nan_policy`` (the metrics count such steps as ``overflow_steps``). When scaling cannot help
  (the scale is fixed or already at ``min_loss_scale``), or without a scaler when the clipped
  norm is not finite, :meth:`Precision.step` reports the problem and the Trainer applies
  ``nan_policy`` to it as to a non-finite loss (stop, or skip the update and count the skip).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from plugtrain.config.precision import PrecisionSettings
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["DEFAULT_INITIAL_LOSS_SCALE", "Precision"]

log = logging.getLogger("plugtrain")

DEFAULT_INITIAL_LOSS_SCALE = 65536.0
"""The first dynamic loss scale when ``initial_loss_scale`` is unset (torch's and Model Zoo's)."""

_NEVER = 2**62
"""A growth interval no run reaches: a fixed loss scale never grows."""


class Precision:
    """Autocast, loss scaling and clipping for one Trainer.

    :param settings: the precision settings; ``None``: full precision, no clipping.
    :param device: the device the model runs on (its type is autocast's ``device_type``).
    :param on_csx: the backend is CSX (its compiler casts; cbfloat16 stays cbfloat16).
    """

    def __init__(
        self, settings: PrecisionSettings | None, device: torch.device, *, on_csx: bool = False
    ) -> None:
        self.settings = settings if settings is not None else PrecisionSettings(enabled=False)
        self.device_type = device.type
        half = self.settings.half_type(on_csx)
        self.dtype: torch.dtype | None = None if on_csx or half is None else getattr(torch, half)
        self.scaler: torch.amp.GradScaler | None = None
        self._fixed_scale: float | None = None
        self.last_grad_norm: float | None = None
        """The total gradient norm before clipping at the last step (with max_gradient_norm)."""
        self._norm_sum = 0.0
        self._norm_count = 0
        self._overflows = 0
        if self.dtype is not None and not torch.amp.is_autocast_available(self.device_type):
            message = f"autocast is not available on device type {self.device_type!r}"
            raise ConfigError([ConfigIssue("precision.enabled", message)])
        if self.dtype is torch.float16:
            self.scaler = self._make_scaler()
        self._say_what_is_inert(half, on_csx)

    def _make_scaler(self) -> torch.amp.GradScaler:
        settings = self.settings
        if settings.dynamic:
            first = settings.initial_loss_scale or DEFAULT_INITIAL_LOSS_SCALE
            first = self._clamped(first)
            interval = settings.steps_per_increase
        else:
            first = float(settings.loss_scaling_factor or 1.0)
            self._fixed_scale = first
            interval = _NEVER
        return torch.amp.GradScaler(self.device_type, init_scale=first, growth_interval=interval)

    def _clamped(self, scale: float) -> float:
        low, high = self.settings.min_loss_scale, self.settings.max_loss_scale
        if high is not None and scale > high:
            scale = high
        if low is not None and scale < low:
            scale = low
        return float(scale)

    def _say_what_is_inert(self, half: str | None, on_csx: bool) -> None:
        """Log, once per Trainer, each setting that has no effect in this run."""
        settings = self.settings
        if settings.fp16_type == "cbfloat16" and half == "bfloat16":
            log.info("precision: fp16_type cbfloat16 exists only on CSX; bfloat16 is used here")
        if on_csx or half is None:
            return
        scaling = settings.dynamic or float(settings.loss_scaling_factor or 1.0) != 1.0
        if self.scaler is None and scaling:
            log.info(
                "precision: %s needs no loss scaling; loss_scaling_factor %s has no effect",
                half,
                settings.loss_scaling_factor,
            )
        if self.scaler is None and settings.log_loss_scale:
            log.info("precision: log_loss_scale has no effect: %s uses no loss scale", half)
        if self.scaler is not None and not settings.dynamic:
            dynamic_only = ("initial_loss_scale", "min_loss_scale", "max_loss_scale")
            given = [name for name in dynamic_only if getattr(settings, name) is not None]
            if given:
                log.info(
                    "precision: %s only apply to loss_scaling_factor: dynamic; the loss scale "
                    "stays %g",
                    ", ".join(given),
                    self._fixed_scale,
                )

    # -- each step ---------------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context of the forward pass and the loss: autocast, or nothing."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate ``loss``, multiplied by the loss scale when there is a scaler."""
        if self.scaler is None:
            loss.backward()
        else:
            self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer, before_step: Callable[[], None]) -> str | None:
        """Unscale and clip the gradients, call ``before_step()``, then step the optimizer.

        :param before_step: called with the final gradients in place, just before the update
            (the Trainer's ``on_before_optimizer_step`` callbacks).
        :returns: ``None`` when the update was applied, or skipped by dynamic loss scaling;
            otherwise why the gradients could not be used (nothing was updated): the Trainer
            hands that to ``loop.nan_policy``.
        """
        scaler = self.scaler
        if scaler is not None:
            scaler.unscale_(optimizer)
        norm = self._clip(optimizer)
        before_step()
        if scaler is None:
            if norm is not None and not math.isfinite(norm):
                optimizer.zero_grad(set_to_none=True)
                self._overflows += 1
                return f"the gradient norm is {norm}"
            optimizer.step()
            return None
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skips the update when the unscaled gradients hold inf/NaN
        scaler.update()
        grown_or_shrunk = scaler.get_scale()
        overflow = grown_or_shrunk < scale
        if self._fixed_scale is not None:
            if grown_or_shrunk != self._fixed_scale:
                scaler.update(new_scale=self._fixed_scale)
        else:
            bounded = self._clamped(grown_or_shrunk)
            if bounded != grown_or_shrunk:
                scaler.update(new_scale=bounded)
        if not overflow:
            return None
        self._overflows += 1
        if self._fixed_scale is not None:
            return f"the gradients are not finite with the fixed loss scale {scale:g}"
        low = self.settings.min_loss_scale
        if low is not None and scale <= low:
            return f"the gradients are not finite at the minimum loss scale {scale:g}"
        return None

    def _clip(self, optimizer: torch.optim.Optimizer) -> float | None:
        """Clip as the settings say; the total norm before clipping when clipping by norm."""
        settings = self.settings
        by_norm, by_value = settings.max_gradient_norm, settings.max_gradient_value
        if by_norm is None and by_value is None:
            return None
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if by_norm is None:
            torch.nn.utils.clip_grad_value_(parameters, by_value)  # type: ignore[arg-type]
            return None
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, by_norm))
        self.last_grad_norm = norm
        if math.isfinite(norm):
            self._norm_sum += norm
            self._norm_count += 1
        return norm

    # -- metrics and checkpoints -------------------------------------------------------------

    @property
    def logs_loss_scale(self) -> bool:
        """Whether ``loss_scale`` goes into the metrics (``log_loss_scale``; unset: dynamic)."""
        wanted = self.settings.log_loss_scale
        if wanted is None:
            wanted = self.settings.dynamic
        return bool(wanted) and self.scaler is not None

    def metrics(self) -> dict[str, float]:
        """Values for the training metrics since the last call, then start a new window.

        ``grad_norm``: the mean pre-clip total norm of the window's steps (clipping by norm);
        ``loss_scale``: the current scale (see :attr:`logs_loss_scale`); ``overflow_steps``:
        steps whose gradients were not finite (their update skipped), when there were any.
        """
        values: dict[str, float] = {}
        if self._norm_count:
            values["grad_norm"] = self._norm_sum / self._norm_count
        if self.logs_loss_scale:
            assert self.scaler is not None
            values["loss_scale"] = float(self.scaler.get_scale())
        if self._overflows:
            values["overflow_steps"] = self._overflows
        self._norm_sum, self._norm_count, self._overflows = 0.0, 0, 0
        return values

    def state_dict(self) -> dict[str, Any] | None:
        """The scaler's state (scale and growth tracker), ``None`` without a scaler."""
        return None if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore the scale and growth tracker from a checkpoint's ``grad_scaler``.

        The run's own settings stay in force: ``steps_per_increase`` as configured now, the
        scale clamped to today's bounds, and a fixed ``loss_scaling_factor`` stays fixed.
        """
        if self.scaler is None or self._fixed_scale is not None:
            if state and self.scaler is None:
                log.info("precision: the checkpoint's grad_scaler state is unused (no scaler)")
            return
        if not state:
            log.info("precision: no grad_scaler state in the checkpoint; the scaler starts anew")
            return
        restored = self.scaler.state_dict()
        restored["scale"] = self._clamped(float(state["scale"]))
        restored["_growth_tracker"] = int(state["_growth_tracker"])
        self.scaler.load_state_dict(restored)
