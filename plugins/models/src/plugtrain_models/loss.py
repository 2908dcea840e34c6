"""Model Zoo's language-model loss (``GPTLMHeadModelLoss``).

Labels are already shifted by the data; ``attention_mask`` is the loss mask. The per-token
cross-entropy is :class:`TokenCrossEntropy`: float32 whatever the logits' dtype, a block of rows
at a time, so that a ``[tokens, vocab]`` float32 copy, log-softmax and zero-filled gradient are
never written out (the gradient is ``softmax - one_hot``, written once, in the logits' dtype).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TokenCrossEntropy", "lm_loss", "masked_accuracy"]

_BLOCK_ELEMENTS = 1 << 20
"""Logits handled at once (4 MiB in float32): a block's float32 work stays in the cache."""


class TokenCrossEntropy(torch.autograd.Function):
    """``logsumexp(z_i) - z_i[y_i]`` per row of logits ``z`` ``[N, V]``, float32 ``[N]``.

    The values and gradient of ``cross_entropy(z.float(), y, reduction="none")``: the same
    float32 arithmetic (max, sum of exponentials, log) on each row, in a different order
    within a row; once differentiable.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each row's cross-entropy; keeps the logits and each row's log-sum-exp."""
        rows = max(1, _BLOCK_ELEMENTS // logits.shape[-1])
        totals = torch.cat([torch.logsumexp(b.float(), dim=-1) for b in logits.split(rows)])
        ctx.save_for_backward(logits, labels, totals)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        return totals - picked

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``grad_i * (softmax(z_i) - one_hot(y_i))``, block by block, in the logits' dtype."""
        logits, labels, totals = ctx.saved_tensors
        out = torch.empty_like(logits)
        rows = max(1, _BLOCK_ELEMENTS // logits.shape[-1])
        for start in range(0, logits.shape[0], rows):
            end = min(start + rows, logits.shape[0])
            scale, target = grad[start:end].unsqueeze(-1), out[start:end]
            shifted = totals[start:end].unsqueeze(-1)
            if logits.dtype == torch.float32:  # computed where it is returned
                block = torch.sub(logits[start:end], shifted, out=target)
            else:  # in float32, then rounded once into the logits' dtype
                block = logits[start:end].float() - shifted
            block.exp_().mul_(scale).scatter_add_(-1, labels[start:end].unsqueeze(-1), -scale)
            if block is not target:
                target.copy_(block)
        return out, None


def lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    scaling: str,
    weight: float,
) -> torch.Tensor:
    """``sum(ce * m) / sum(m)`` (``num_tokens``) or ``sum(ce * m) / B * weight`` (``batch_size``).

    A batch whose mask is all zero gives 0 under ``num_tokens`` (Model Zoo divides by zero).
    """
    vocab = logits.shape[-1]
    ce = TokenCrossEntropy.apply(logits.reshape(-1, vocab), labels.reshape(-1).long())
    m = mask.reshape(-1).to(ce.dtype)
    total = (ce * m).sum()
    if scaling == "batch_size":
        return total / labels.shape[0] * weight
    return total / m.sum().clamp_min(1.0)


@torch.no_grad()
def masked_accuracy(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(m * [argmax == label]) / sum(m > 0)``.

    The argmax is ``max``'s index (the first largest logit too, as ``argmax``'s), which torch's
    CPU kernels find 3-5x faster.
    """
    hits = (logits.max(-1).indices == labels).float() * mask.float()
    return hits.sum() / (mask > 0).sum().clamp_min(1)
