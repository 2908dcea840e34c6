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
    (``g`` without momentum); ``p -= lr * update``. The multi-tensor path allocates nothing per
    step: it folds the weight decay into scalar multipliers of ``p``.
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
        """One SGD step over ``params``; the weight decay is folded into scalar multipliers."""
        lr = as_float(group["lr"])
        wd = as_float(group["weight_decay"])
        momentum = as_float(group["momentum"])
        damp = as_float(group["dampening"])
        sign = -1.0 if group["maximize"] else 1.0
        lists = [params, grads]
        if momentum != 0:
            lists.append([self.state[p]["momentum_buffer"] for p in params])
        for ops, run, _ in self.runs(group, lists):
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
