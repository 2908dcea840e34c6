"""SGD with the numerics of cstorch 2.10."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain.schema import REQUIRED
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

    def __init__(
        self,
        params: Any,
        lr: float = REQUIRED,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
        foreach: bool | None = None,
        **aliases: Any,
    ) -> None:
        super().__init__(
            params,
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            **aliases,
        )

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Momentum buffers start at zero (cstorch), so they exist before the first step."""
        if group["momentum"] != 0:
            state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One SGD step over ``params``."""
        lr = as_float(group["lr"])
        wd = as_float(group["weight_decay"])
        momentum = as_float(group["momentum"])
        dampening = as_float(group["dampening"])
        sign = -1.0 if group["maximize"] else 1.0
        bufs = [self.state[p]["momentum_buffer"] for p in params] if momentum != 0 else []
        if self.use_foreach(group, params):
            _sgd_foreach(params, grads, bufs, lr, wd, momentum, dampening, group["nesterov"], sign)
        else:
            _sgd_single(params, grads, bufs, lr, wd, momentum, dampening, group["nesterov"], sign)


def _sgd_single(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    bufs: list[torch.Tensor],
    lr: float,
    wd: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
    sign: float,
) -> None:
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        d_p = g.mul(sign) if sign != 1.0 else g
        if wd != 0:
            d_p = d_p.add(p, alpha=wd)
        if momentum != 0:
            buf = bufs[i]
            buf.mul_(momentum).add_(d_p, alpha=1 - dampening)
            d_p = d_p.add(buf, alpha=momentum) if nesterov else buf
        p.add_(d_p, alpha=-lr)


def _sgd_foreach(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    bufs: list[torch.Tensor],
    lr: float,
    wd: float,
    momentum: float,
    dampening: float,
    nesterov: bool,
    sign: float,
) -> None:
    lists = [params, grads, bufs] if bufs else [params, grads]
    for run in PlugtrainOptimizer.foreach_groups(lists):  # type: ignore[arg-type]
        ps, gs = run[0], run[1]
        if momentum == 0:
            # p <- p - lr * (sign * g + wd * p)
            if wd != 0:
                torch._foreach_mul_(ps, 1 - lr * wd)
            torch._foreach_add_(ps, gs, alpha=-lr * sign)
            continue
        bs = run[2]
        # buf <- momentum * buf + (1 - dampening) * (sign * g + wd * p), without a temporary
        torch._foreach_mul_(bs, momentum)
        torch._foreach_add_(bs, gs, alpha=(1 - dampening) * sign)
        if wd != 0:
            torch._foreach_add_(bs, ps, alpha=(1 - dampening) * wd)
        if nesterov:
            # p <- p - lr * (sign * g + wd * p + momentum * buf)
            if wd != 0:
                torch._foreach_mul_(ps, 1 - lr * wd)
            torch._foreach_add_(ps, gs, alpha=-lr * sign)
            torch._foreach_add_(ps, bs, alpha=-lr * momentum)
        else:
            torch._foreach_add_(ps, bs, alpha=-lr)
