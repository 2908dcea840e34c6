"""Adam and AdamW with the numerics of cstorch 2.10, with torch's fused kernel where it agrees."""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers._ops import ListOps
from plugtrain_optimizers.schemas import AdamArgs, AdamWArgs

__all__ = ["Adam", "AdamW"]

_FUSED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class _AdamBase(PlugtrainOptimizer):
    """The update shared by Adam and AdamW (cstorch's formula).

    ``g += l2 * p``; ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g^2`` (AMSGrad: the running
    maximum of ``v``); ``update = m / (sqrt(v) + eps) * sqrt(1 - b2^t) / (1 - b1^t)`` (no
    correction with ``correct_bias=False``); ``p -= lr * (update + wd * p)``.

    Paths: torch's fused kernel (``fused``; default where it computes these numbers, i.e. with
    bias correction and at most one of L2 and decoupled decay) with eps replaced by
    ``eps / sqrt(1 - b2^t)``; else the multi-tensor or per-tensor path with scratch buffers.
    """

    decoupled: bool

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero moments (and their running maximum under AMSGrad)."""
        state["step"] = self.new_step()
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adam step over ``params``."""
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        if group["amsgrad"]:
            lists.append([s["max_exp_avg_sq"] for s in states])
        steps = [s["step"] for s in states]
        ts = self.step_all(group, steps)
        if self._fusable(group, params):
            self._fused(group, [*lists, steps], ts)
            return
        lr = as_float(group["lr"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        if group.get("correct_bias", True):
            step_sizes = [-lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) for t in ts]
        else:
            step_sizes = [-lr] * len(ts)
        for ops, run, (sizes,) in self.blocks(group, lists, [step_sizes]):
            self._update(ops, group, sizes, *run)

    def _l2(self, group: dict[str, Any]) -> float:
        return 0.0

    def _fusable(self, group: dict[str, Any], params: list[torch.Tensor]) -> bool:
        fused = group.get("fused")
        if fused is False or not group.get("correct_bias", True):
            return False
        if self._l2(group) != 0 and as_float(group["weight_decay"]) != 0:
            return False
        return all(
            p.dtype in _FUSED_DTYPES and p.device.type in ("cpu", "cuda", "mps") for p in params
        )

    def _fused(
        self, group: dict[str, Any], lists: list[list[torch.Tensor]], ts: list[float]
    ) -> None:
        lr = as_float(group["lr"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        eps = as_float(group["eps"])
        l2, wd = self._l2(group), as_float(group["weight_decay"])
        amsgrad = bool(group["amsgrad"])
        kernel = torch._fused_adam_ if l2 != 0 else torch._fused_adamw_
        for run, values, _ in self.fused_runs(group, lists, ts):
            # The kernel takes one eps; eps_t depends on t, so split by step (usually one call).
            for t, where in self.split_by(values):
                part = self.take(run, where)
                kernel(
                    *part[:4],
                    part[4] if amsgrad else [],
                    part[-1],
                    amsgrad=amsgrad,
                    lr=lr,
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=l2 if l2 != 0 else wd,
                    eps=eps / math.sqrt(1 - beta2 ** float(t)),  # type: ignore[arg-type]
                    maximize=False,
                )

    def _update(
        self,
        ops: ListOps,
        group: dict[str, Any],
        step_sizes: list[float],
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        maxes: list[torch.Tensor] | None = None,
    ) -> None:
        lr = as_float(group["lr"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        eps = as_float(group["eps"])
        wd = as_float(group["weight_decay"])
        grads = self.effective_grads(ops, params, grads, weight_decay=self._l2(group), slot=1)
        ops.lerp_(exp_avgs, grads, 1 - beta1)
        ops.mul_(exp_avg_sqs, beta2)
        ops.addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        second = exp_avg_sqs
        if maxes is not None:
            ops.maximum_(maxes, exp_avg_sqs)
            second = maxes
        denom = self.block_scratch(params, 0)
        ops.sqrt_into(denom, second)
        ops.add_scalar_(denom, eps)
        if wd != 0:
            ops.mul_(params, 1 - lr * wd)
        ops.addcdiv_(params, exp_avgs, denom, step_sizes)


class Adam(_AdamBase):
    """Adam as cstorch computes it; ``weight_decay`` is an L2 penalty on the gradient.

    The constructor's ``weight_decay`` (and a group's ``weight_decay`` given at construction)
    becomes the group's ``l2_regularization_rate``; the group's ``weight_decay`` starts at 0 and,
    when a weight-decay scheduler sets it, is applied as decoupled decay ``p -= lr * wd * p``.
    """

    schema = AdamArgs
    name = "Adam"

    def prepare_defaults(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """Move the L2 rate out of ``weight_decay`` (which then starts at 0)."""
        defaults["l2_regularization_rate"] = defaults["weight_decay"]
        defaults["weight_decay"] = 0.0
        return defaults

    def prepare_group(self, group: dict[str, Any]) -> dict[str, Any]:
        """A group's own ``weight_decay`` is its L2 rate, as for the constructor argument."""
        if "weight_decay" in group and "l2_regularization_rate" not in group:
            rate = group.pop("weight_decay")
            if not isinstance(rate, torch.Tensor) and not (
                isinstance(rate, int | float) and rate >= 0
            ):
                message = f"must be >= 0, got {rate!r}"
                raise ConfigError([ConfigIssue("Adam param group.weight_decay", message)])
            group["l2_regularization_rate"] = rate
            group["weight_decay"] = 0.0
        return group

    def _l2(self, group: dict[str, Any]) -> float:
        return as_float(group["l2_regularization_rate"])


class AdamW(_AdamBase):
    """AdamW as cstorch computes it (decoupled decay; ``correct_bias=False`` drops correction)."""

    schema = AdamWArgs
    name = "AdamW"
