"""Model Zoo's T5 / transformer loss (``T5ForConditionalGenerationLoss``).

``ce * m`` with ``m`` the ``decoder_attention_mask``, then by ``mlm_loss_scaling``:

- ``batch_size``: ``sum / B * lm_loss_weight``;
- ``num_masked``: ``sum / sum(m)``;
- ``precomputed_num_masked``: ``m`` is first multiplied by the loader's ``loss_weight``, then
  ``sum / B``. Without that feature Model Zoo falls back to ``batch_size`` with weight
  ``lm_loss_weight`` (or 1), which this does too, saying so once.

In training with ``label_smoothing`` e the per-token loss is ``(1 - e) ce + e mean(-log p)``.
"""

from __future__ import annotations

import logging

import torch
from torch.nn import functional

from plugtrain_models.loss import TokenCrossEntropy

__all__ = ["t5_loss"]

log = logging.getLogger("plugtrain_models.encoders")
_warned: set[str] = set()


def t5_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    scaling: str,
    weight: float,
    loss_weight: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """The loss of ``logits`` ``[B, T, V]`` against ``labels`` ``[B, T]`` (see the module).

    :param mask: the ``decoder_attention_mask`` ``[B, T]``.
    :param scaling: ``batch_size``, ``num_masked`` or ``precomputed_num_masked``.
    :param weight: ``lm_loss_weight``.
    :param loss_weight: the loader's per-token ``loss_weight`` ``[B, T]`` (or ``[B, 1]``).
    :param label_smoothing: e above (0 outside training).
    """
    m = mask.to(torch.float32)
    if scaling == "precomputed_num_masked":
        if loss_weight is not None:
            m = m * loss_weight.to(torch.float32)
        else:
            if scaling not in _warned:
                _warned.add(scaling)
                log.warning(
                    "mlm_loss_scaling is precomputed_num_masked but the batch has no "
                    "loss_weight: the loss falls back to batch_size scaling with weight %s",
                    weight or 1.0,
                )
            scaling, weight = "batch_size", weight or 1.0
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    ce = TokenCrossEntropy.apply(flat, labels.reshape(-1).long())
    if label_smoothing > 0.0:
        uniform = -functional.log_softmax(flat.float(), dim=-1).mean(dim=-1)
        ce = (1.0 - label_smoothing) * ce + label_smoothing * uniform
    total = (ce * m.reshape(-1)).sum()
    batch = labels.shape[0]
    if scaling == "num_masked":
        return total / m.sum()
    if scaling == "precomputed_num_masked":
        return total / batch
    return total / batch * weight
