"""Model Zoo's language-model loss (``GPTLMHeadModelLoss``).

Labels are already shifted by the data; ``attention_mask`` is the loss mask.
"""

from __future__ import annotations

import torch
from torch.nn import functional

__all__ = ["lm_loss", "masked_accuracy"]


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
    ce = functional.cross_entropy(
        logits.reshape(-1, vocab).float(), labels.reshape(-1).long(), reduction="none"
    )
    m = mask.reshape(-1).to(ce.dtype)
    total = (ce * m).sum()
    if scaling == "batch_size":
        return total / labels.shape[0] * weight
    return total / m.sum().clamp_min(1.0)


@torch.no_grad()
def masked_accuracy(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum(m * [argmax == label]) / sum(m > 0)``."""
    hits = (logits.argmax(-1) == labels).float() * mask.float()
    return hits.sum() / (mask > 0).sum().clamp_min(1)
