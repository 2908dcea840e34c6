"""DPR's in-batch contrastive loss (Model Zoo's ``DPRLoss``), negatives gathered across processes.

``q2c = q @ ctx^T`` ``[B, B*C]``; the loss is the mean cross-entropy of ``q2c / T`` against
``labels`` (the positive context of question i is column ``i*C``). With
``mutual_information`` it is ``(1 - f) q2c_loss + f c2q_loss``, ``f = 1 / (1 + C)``, where
``c2q = ctx_first @ q^T`` ``[B, B]`` scores each question's first context against every question.

Under data parallel every process holds a slice of the global batch; the other processes'
contexts (and, for ``c2q``, questions) are gathered so that each question is scored against the
whole global batch, as on one device. :func:`gather_with_grad` sends each process the gradient
its own rows receive from every process's loss, so that the averaged gradients equal those of
one process taking the global batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn import functional

__all__ = ["GatherRows", "contrastive_loss", "gather_with_grad", "world"]


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group (``(0, 1)`` without one)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class GatherRows(torch.autograd.Function):
    """Every process's ``[N, H]`` rows stacked in rank order.

    The backward keeps this process's rows' gradient summed over every process (an all-reduce,
    which every backend has).
    """

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor) -> torch.Tensor:
        """``[world * N, H]``."""
        rank, size = world()
        ctx.rank, ctx.count = rank, rows.shape[0]
        parts = [torch.empty_like(rows) for _ in range(size)]
        dist.all_gather(parts, rows.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        """The gradient of this process's rows, from every process's loss."""
        total = grad.contiguous().clone()
        dist.all_reduce(total)
        return total[ctx.rank * ctx.count : (ctx.rank + 1) * ctx.count]


def gather_with_grad(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Every process's ``rows`` (itself alone without data parallel), and this one's offset."""
    rank, size = world()
    if size == 1:
        return rows, 0
    gathered: torch.Tensor = GatherRows.apply(rows)
    return gathered, rank * rows.shape[0]


def contrastive_loss(
    q: torch.Tensor,
    ctx: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float,
    mutual_information: bool,
    context_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss and the (gathered) ``q2c`` scores (see the module).

    :param q: the local questions' embeddings ``[B, H]``.
    :param ctx: the local contexts' embeddings ``[B*C, H]``.
    :param labels: the positive context of each question, indexing the local contexts.
    :param context_labels: the question of each first context, indexing the local questions.
    """
    batch = q.shape[0]
    contexts = ctx.shape[0] // batch
    all_ctx, ctx_offset = gather_with_grad(ctx)
    q2c = q @ all_ctx.T
    loss = functional.cross_entropy(q2c.float() / temperature, labels.long() + ctx_offset)
    if mutual_information:
        if context_labels is None:
            context_labels = torch.arange(batch, device=q.device)
        all_q, q_offset = gather_with_grad(q)
        first = ctx.view(batch, contexts, -1)[:, 0]
        c2q = first @ all_q.T
        c2q_loss = functional.cross_entropy(
            c2q.float() / temperature, context_labels.long() + q_offset
        )
        f = 1.0 / (1 + contexts)
        loss = (1 - f) * loss + f * c2q_loss
    return loss, q2c
