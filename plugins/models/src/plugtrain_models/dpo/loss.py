"""Model Zoo's ``DPOLoss`` and the per-sequence log-probabilities it compares.

Labels are already shifted by the data and ``attention_mask`` is the loss mask, as for the
decoders: a sequence's log-probability is the sum over its masked positions of
``log_softmax(logits)[label]`` (the mean over them for IPO, Model Zoo's ``average_logps``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional

from plugtrain_models.loss import TokenCrossEntropy

__all__ = ["dpo_losses", "pair_outputs", "response_logps", "summaries"]

IGNORE_INDEX = -100
"""A label never scored, whatever the mask says."""


def response_logps(
    logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B], [B])`` float32: each row's summed log-prob of its masked labels, and their count.

    The sum over ``log_softmax(logits)[label]`` where ``mask`` is set and the label is not
    ``-100``; the count divides it into Model Zoo's ``average_logps`` (IPO).
    """
    scored = labels != IGNORE_INDEX
    weights = mask.to(torch.float32) * scored
    labels = labels.masked_fill(~scored, 0).long()
    vocab = logits.shape[-1]
    ce = TokenCrossEntropy.apply(logits.reshape(-1, vocab), labels.reshape(-1))
    return -(ce.view(labels.shape) * weights).sum(-1), weights.sum(-1)


def dpo_losses(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor | None,
    reference_rejected: torch.Tensor | None,
    *,
    beta: float,
    loss_type: str,
    dpop_penalty_weight: float = 5.0,
) -> torch.Tensor:
    """Each pair's loss; ``None`` references: ``reference_free`` (their log-ratio is 0).

    ``h = (pi_c - pi_r) - (ref_c - ref_r)``; sigmoid ``-log sigmoid(beta h)``, hinge
    ``relu(1 - beta h)``, IPO ``(h - 1/(2 beta))^2``, DPOP ``-log sigmoid(beta (h - lambda
    max(0, ref_c - pi_c)))``.
    """
    logits = policy_chosen - policy_rejected
    if reference_chosen is not None and reference_rejected is not None:
        logits = logits - (reference_chosen - reference_rejected)
    if loss_type == "sigmoid":
        return -functional.logsigmoid(beta * logits)
    if loss_type == "hinge":
        return torch.relu(1 - beta * logits)
    if loss_type == "ipo":
        return (logits - 1 / (2 * beta)) ** 2
    if loss_type == "dpop":
        if reference_chosen is None:
            raise ValueError("loss_type dpop needs a reference model (reference_free: false)")
        penalty = torch.clamp(reference_chosen - policy_chosen, min=0.0)
        return -functional.logsigmoid(beta * (logits - dpop_penalty_weight * penalty))
    raise ValueError(f"unknown DPO loss_type {loss_type!r}: sigmoid, hinge, ipo or dpop")


def pair_outputs(
    sums: torch.Tensor,
    counts: torch.Tensor,
    reference: torch.Tensor | None,
    *,
    beta: float,
    loss_type: str,
    dpop_penalty_weight: float = 5.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The batch's loss and summaries from ``[B, 2]`` chosen/rejected response log-probs.

    :param sums: the policy's summed response log-probs (chosen, rejected).
    :param counts: the scored tokens of each response (IPO compares per-token means).
    :param reference: the reference's summed log-probs; ``None``: ``reference_free``.
    """
    per_token = counts.clamp_min(1.0)
    policy = sums / per_token if loss_type == "ipo" else sums
    ref = None
    if reference is not None:
        ref = reference / per_token if loss_type == "ipo" else reference
    losses = dpo_losses(
        policy[:, 0], policy[:, 1],
        None if ref is None else ref[:, 0], None if ref is None else ref[:, 1],
        beta=beta, loss_type=loss_type, dpop_penalty_weight=dpop_penalty_weight,
    )  # fmt: skip
    detached = None if reference is None else reference.detach()
    return losses.mean(), summaries(sums.detach(), detached, beta)


def summaries(sums: torch.Tensor, reference: torch.Tensor | None, beta: float) -> dict[str, Any]:
    """Model Zoo's DPO summaries (TRL's ``rewards/*`` and ``logps/*``), batch means.

    Rewards are ``beta * (policy - reference)`` of the summed log-probs (for IPO too, as TRL
    computes them); without a reference only the policy's log-probs are reported.
    """
    out = {
        "policy_chosen_logps": sums[:, 0].mean(),
        "policy_rejected_logps": sums[:, 1].mean(),
    }
    if reference is not None:
        rewards = beta * (sums - reference)
        chosen, rejected = rewards[:, 0], rewards[:, 1]
        out["chosen_rewards"] = chosen.mean()
        out["rejected_rewards"] = rejected.mean()
        out["reward_accuracies"] = (chosen > rejected).float().mean()
        out["reward_margins"] = (chosen - rejected).mean()
    return out
