"""Model Zoo's losses of the BERT family (``mz:losses/BertPretrainModelLoss.py`` and the heads').

All take float logits and integer labels of any int dtype; a sum over predictions divided by
the batch size B is Model Zoo's normalisation for the MLM, token and summarization losses.
"""

from __future__ import annotations

import torch
from torch.nn import functional

__all__ = ["classifier_loss", "mlm_nsp_loss", "summarization_loss", "token_loss"]


def _summed_ce(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, smoothing: float = 0.0
) -> torch.Tensor:
    """``Σ ce(logits, labels) · weights`` over every position (float32 cross-entropy).

    ``smoothing`` is Model Zoo's ``smooth_loss``: ``(1 - s) ce + s mean_c(-log p_c)``.
    """
    per = functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1).long(),
        reduction="none",
        label_smoothing=smoothing,
    )
    return (per * weights.reshape(-1).to(per.dtype)).sum()


def mlm_nsp_loss(
    mlm_logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    nsp_logits: torch.Tensor | None,
    nsp_labels: torch.Tensor | None,
    mlm_loss_weight: float,
    mlm_loss_scale: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """``Σ ce·mask / B * mlm_loss_weight`` (+ the NSP mean cross-entropy).

    With a ``mlm_loss_scale`` feature the mask is multiplied by it and ``mlm_loss_weight`` is not
    applied, as in Model Zoo. ``label_smoothing`` smooths the MLM term (the caller passes it in
    training only, as Model Zoo applies it).
    """
    weights = mask if mlm_loss_scale is None else mask * mlm_loss_scale
    loss = _summed_ce(mlm_logits, labels, weights, label_smoothing) / labels.shape[0]
    if mlm_loss_scale is None:
        loss = loss * mlm_loss_weight
    if nsp_logits is not None:
        if nsp_labels is None:
            raise ValueError("a batch for a model with NSP needs next_sentence_label")
        nsp = functional.cross_entropy(
            nsp_logits.reshape(-1, nsp_logits.shape[-1]).float(), nsp_labels.reshape(-1).long()
        )
        loss = loss + nsp
    return loss


def classifier_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str) -> torch.Tensor:
    """Mean CE (``single_label_classification``), MSE (``regression``) or BCE with logits."""
    logits = logits.float()
    if problem_type == "regression":
        if logits.shape[-1] == 1:
            return functional.mse_loss(logits.squeeze(), labels.squeeze().float())
        return functional.mse_loss(logits, labels.float())
    if problem_type == "multi_label_classification":
        return functional.binary_cross_entropy_with_logits(logits, labels.float().reshape(-1))
    return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def token_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_weight: float,
    include_padding: bool,
) -> torch.Tensor:
    """``Σ ce·loss_mask / B * w``, w divided by S too when padding is scored."""
    weight = loss_weight / loss_mask.shape[1] if include_padding else loss_weight
    return _summed_ce(logits, labels, loss_mask) / labels.shape[0] * weight


def summarization_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, loss_weight: float
) -> torch.Tensor:
    """``Σ ce·cls_weights / B * loss_weight``."""
    return _summed_ce(logits, labels, weights) / labels.shape[0] * loss_weight
