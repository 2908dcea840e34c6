"""Model Zoo's language-model loss (``GPTLMHeadModelLoss``).

Labels are already shifted by the data; ``attention_mask`` is the loss mask. The per-token
cross-entropy is :class:`TokenCrossEntropy`: float32 whatever the logits' dtype, a block of rows
at a time, so that a ``[tokens, vocab]`` float32 copy, log-softmax and zero-filled gradient are
never written out (the gradient is ``softmax - one_hot``, written once, in the logits' dtype,
into the logits' own memory when nothing reads them after the loss).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TokenCrossEntropy", "lm_loss", "masked_accuracy"]

_BLOCK_ELEMENTS = 1 << 20
"""Logits handled at once (4 MiB in float32): a block's float32 work stays in the cache."""


class TokenCrossEntropy(torch.autograd.Function):
    """``-log_softmax(z_i)[y_i]`` per row of logits ``z`` ``[N, V]``, float32 ``[N]``.

    The values of ``cross_entropy(z.float(), y, reduction="none")`` (the same log-softmax
    kernel on each block of rows) and its gradient; once differentiable. With ``overwrite``
    the backward writes the gradient into the logits' memory instead of a new ``[N, V]``
    tensor (on the CPU, a fresh tensor of that size is new pages that the kernel must fault
    in and zero): only for logits that nothing else reads after the loss. A second backward
    through the same logits then fails (autograd sees them modified) instead of being wrong.
    """

    @staticmethod
    def forward(
        ctx: Any, logits: torch.Tensor, labels: torch.Tensor, overwrite: bool = False
    ) -> torch.Tensor:
        """Each row's cross-entropy; keeps the logits for the backward."""
        rows = max(1, _BLOCK_ELEMENTS // logits.shape[-1])
        work = logits.new_empty((min(rows, len(logits)), logits.shape[-1]), dtype=torch.float32)
        picked = []  # each block's log-softmax written into one float32 buffer
        for block, targets in zip(logits.split(rows), labels.split(rows), strict=True):
            log_softmax = _softmax_into(block, work, _LOG_SOFTMAX)
            picked.append(log_softmax.gather(-1, targets.unsqueeze(-1)))
        ctx.save_for_backward(logits, labels)
        ctx.overwrite = overwrite
        return torch.cat(picked).squeeze(-1).neg_()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        """``grad_i * (softmax(z_i) - one_hot(y_i))``, block by block, in the logits' dtype."""
        logits, labels = ctx.saved_tensors
        out = logits.detach() if ctx.overwrite else torch.empty_like(logits)
        rows = max(1, _BLOCK_ELEMENTS // logits.shape[-1])
        wide = logits.dtype == torch.float32  # then computed where it is returned
        work = None if wide else torch.empty_like(logits[:rows], dtype=torch.float32)
        for start in range(0, logits.shape[0], rows):
            end = min(start + rows, logits.shape[0])
            scale, target = grad[start:end].unsqueeze(-1), out[start:end]
            # else in float32, then rounded once into the logits' dtype
            block = _softmax_into(logits[start:end], target if wide else work, _SOFTMAX)
            block.mul_(scale).scatter_add_(-1, labels[start:end].unsqueeze(-1), -scale)
            if not wide:
                target.copy_(block)
        return out, None, None


_SOFTMAX, _LOG_SOFTMAX = torch.ops.aten._softmax.out, torch.ops.aten._log_softmax.out


def _softmax_into(block: torch.Tensor, work: Any, kernel: Any) -> torch.Tensor:
    """``kernel`` (softmax or log-softmax over rows) of ``block`` in float32, in ``work``'s rows.

    A float32 block is read where it is; another is first copied into ``work`` (no new
    tensor per block).
    """
    into = work[: len(block)]
    if block.dtype != torch.float32:
        block = into.copy_(block)
    result: torch.Tensor = kernel(block, -1, False, out=into)
    return result


def lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    scaling: str,
    weight: float,
    overwrite: bool = True,
) -> torch.Tensor:
    """``sum(ce * m) / sum(m)`` (``num_tokens``) or ``sum(ce * m) / B * weight`` (``batch_size``).

    A batch whose mask is all zero gives 0 under ``num_tokens`` (Model Zoo divides by zero).
    With ``overwrite`` (the default: a model's forward computes its logits for the loss
    alone), the backward leaves the logits' gradient in their memory (see
    :class:`TokenCrossEntropy`): pass false for logits read again after the backward.
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    ce = TokenCrossEntropy.apply(flat, labels.reshape(-1).long(), overwrite)
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
