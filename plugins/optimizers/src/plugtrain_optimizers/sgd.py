"""SGD with the numerics of cstorch 2.10."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import SGDArgs

__all__ = ["SGD"]


class SGD(PlugtrainOptimizer):
    """Stochastic gradient descent with momentum, as cstorch computes it.

    ``g += weight_decay * p``; ``buf = momentum * buf + (1 - dampening) * g`` (from the first
    step, ``buf`` starting at zero); ``update = g + momentum * buf`` with Nesterov, else ``buf``
    (``g`` without momentum); ``p -= lr * update``. Torch's fused SGD kernel computes exactly
    this (one pass over memory) and is used wherever it runs; the multi-tensor path allocates
    nothing per step: it folds the weight decay into scalar multipliers of ``p``.
    """

    schema = SGDArgs
    name = "SGD"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Momentum buffers start at zero (cstorch), so they exist before the first step."""
        if group["momentum"] != 0:
            state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One SGD step over ``params`` (torch's fused kernel where it applies)."""
        lr = as_float(group["lr"])
        wd = as_float(group["weight_decay"])
        momentum = as_float(group["momentum"])
        damp = as_float(group["dampening"])
        lists = [params, grads]
        if momentum != 0:
            lists.append([self.state[p]["momentum_buffer"] for p in params])
        # torch 2.13's CPU fused SGD goes wrong for 16-bit parameters (tested): not used there.
        if self.can_fuse(group, params) and all(
            p.dtype in (torch.float32, torch.float64) or p.device.type != "cpu" for p in params
        ):
            # torch's kernel with is_first_step=False is cstorch's rule: buf starts at zero and
            # is dampened from the first step.
            for run in self.fused_lists(group, lists):
                torch._fused_sgd_(
                    run[0],
                    run[1],
                    run[2] if momentum != 0 else [],
                    weight_decay=wd,
                    momentum=momentum,
                    lr=lr,
                    dampening=damp,
                    nesterov=bool(group["nesterov"]),
                    maximize=bool(group["maximize"]),
                    is_first_step=False,
                )
            return
        sign = -1.0 if group["maximize"] else 1.0
        for ops, run, _ in self.blocks(group, lists):
            ps, gs = run[0], run[1]
            if momentum == 0:
                # p <- p - lr * (sign * g + wd * p)
                if wd != 0:
                    ops.mul_(ps, 1 - lr * wd)
                ops.add_(ps, gs, alpha=-lr * sign)
                continue
            bufs = run[2]
            # buf <- momentum * buf + (1 - dampening) * (sign * g + wd * p), without a temporary
            ops.mul_(bufs, momentum)
            ops.add_(bufs, gs, alpha=(1 - damp) * sign)
            if wd != 0:
                ops.add_(bufs, ps, alpha=(1 - damp) * wd)
            if group["nesterov"]:
                # p <- p - lr * (sign * g + wd * p + momentum * buf)
                if wd != 0:
                    ops.mul_(ps, 1 - lr * wd)
                ops.add_(ps, gs, alpha=-lr * sign)
                ops.add_(ps, bufs, alpha=-lr * momentum)
            else:
                ops.add_(ps, bufs, alpha=-lr)
