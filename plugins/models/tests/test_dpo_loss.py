"""DPO's loss, rewards and accuracies equal TRL's ``DPOTrainer`` on the same log-probabilities.

TRL computes them inside ``DPOTrainer._compute_loss`` (no standalone loss function), which
runs the model and reads per-token log-probs from its output. The oracle calls that method
unbound, with a stand-in for the trainer (the attributes the method reads, as
``DPOTrainer.__init__`` sets them from ``DPOConfig``) and a stand-in model returning the given
per-token log-probabilities; the reference's come precomputed (``precompute_ref_log_probs``).
TRL has no ``reference_free``: its loss with reference log-probs of 0 is the reference-free
one (Model Zoo's ``ref_logratios = 0``). DPOP is not in TRL; it is checked against Model Zoo's
formula written out.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from plugtrain_models.dpo.loss import pair_outputs

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    trl_dpo = pytest.importorskip("trl.trainer.dpo_trainer")

B, S = 6, 12


class _Accelerator:
    device = torch.device("cpu")

    @staticmethod
    def gather(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    gather_for_metrics = gather


def _trl(
    policy_tokens: torch.Tensor,
    reference: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float,
    loss_type: str,
) -> tuple[float, dict[str, float]]:
    """TRL's loss and metrics; ``*_tokens`` ``[2B, S]`` per-token log-probs, chosen rows first."""
    completion = torch.zeros(2 * B, S + 1, dtype=torch.long)
    completion[:, 1:] = mask
    outputs = SimpleNamespace(
        log_probs=policy_tokens * mask,
        entropy=torch.zeros(2 * B, S),
        mean_logits=torch.zeros(2 * B, S),
        is_top1=torch.zeros(2 * B, S, dtype=torch.bool),
    )

    def model(**_: Any) -> SimpleNamespace:
        return outputs

    model.training = True  # type: ignore[attr-defined]
    trainer = SimpleNamespace(
        model=model, accelerator=_Accelerator(), aux_loss_enabled=False,
        precompute_ref_logps=True, ld_alpha=None, f_divergence_type="reverse_kl",
        loss_types=[loss_type], loss_weights=[1.0], beta=beta, use_weighting=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0, _tp_size=1,
    )  # fmt: skip
    chosen_ref, rejected_ref = reference.chunk(2)
    inputs = {
        "input_ids": torch.zeros(2 * B, S + 1, dtype=torch.long),
        "attention_mask": torch.ones(2 * B, S + 1, dtype=torch.long),
        "completion_mask": completion,
        "ref_chosen_logps": chosen_ref,
        "ref_rejected_logps": rejected_ref,
    }
    loss = trl_dpo.DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return float(loss), metrics


def _case(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token policy log-probs ``[2B, S]``, reference sums ``[2B]``, response masks."""
    g = torch.Generator().manual_seed(seed)
    tokens = -torch.rand(2 * B, S, generator=g, dtype=torch.float64) * 3
    reference = -torch.rand(2 * B, generator=g, dtype=torch.float64) * 3 * S / 2
    lengths = torch.randint(2, S + 1, (2 * B,), generator=g)
    starts = torch.randint(0, 2, (2 * B,), generator=g)
    positions = torch.arange(S)
    mask = ((positions >= starts[:, None]) & (positions < lengths[:, None])).long()
    return tokens, reference, mask


def _ours(
    tokens: torch.Tensor, reference: torch.Tensor | None, mask: torch.Tensor, **options: Any
) -> tuple[float, dict[str, float]]:
    sums = (tokens * mask).sum(-1)
    pairs = lambda x: torch.stack(x.chunk(2), dim=1)  # noqa: E731 - [2B] chosen-first -> [B, 2]
    loss, metrics = pair_outputs(
        pairs(sums), pairs(mask.sum(-1).double()),
        None if reference is None else pairs(reference), **options,
    )  # fmt: skip
    return float(loss), {k: float(v) for k, v in metrics.items()}


NAMES = {
    "chosen_rewards": "rewards/chosen", "rejected_rewards": "rewards/rejected",
    "reward_accuracies": "rewards/accuracies", "reward_margins": "rewards/margins",
    "policy_chosen_logps": "logps/chosen", "policy_rejected_logps": "logps/rejected",
}  # fmt: skip


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5])
def test_loss_rewards_and_accuracies_equal_trls(loss_type: str, beta: float) -> None:
    for seed in range(3):
        tokens, reference, mask = _case(seed)
        theirs, their_metrics = _trl(tokens, reference, mask, beta=beta, loss_type=loss_type)
        ours, metrics = _ours(tokens, reference, mask, beta=beta, loss_type=loss_type)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)
        for name, trl_name in NAMES.items():
            assert metrics[name] == pytest.approx(their_metrics[trl_name], rel=1e-6, abs=1e-9)
        assert 0 < metrics["reward_accuracies"] < 1  # the case separates right and wrong pairs


@pytest.mark.parametrize("loss_type", ["sigmoid", "hinge", "ipo"])
def test_reference_free_is_trls_loss_with_a_zero_reference(loss_type: str) -> None:
    tokens, reference, mask = _case(7)
    theirs, _ = _trl(tokens, torch.zeros_like(reference), mask, beta=0.1, loss_type=loss_type)
    ours, metrics = _ours(tokens, None, mask, beta=0.1, loss_type=loss_type)
    with_reference, _ = _ours(tokens, reference, mask, beta=0.1, loss_type=loss_type)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12)
    assert ours != pytest.approx(with_reference)
    assert set(metrics) == {"policy_chosen_logps", "policy_rejected_logps"}  # as Model Zoo


def test_beta_changes_the_loss_and_rewards_as_trl_does() -> None:
    tokens, reference, mask = _case(3)
    results = [_ours(tokens, reference, mask, beta=b, loss_type="sigmoid") for b in (0.1, 0.2)]
    (low, low_metrics), (high, high_metrics) = results
    assert low != pytest.approx(high)
    assert high == pytest.approx(_trl(tokens, reference, mask, beta=0.2, loss_type="sigmoid")[0])
    # rewards are beta * log-ratio: doubling beta doubles them, accuracies do not move
    assert high_metrics["chosen_rewards"] == pytest.approx(2 * low_metrics["chosen_rewards"])
    assert high_metrics["reward_accuracies"] == low_metrics["reward_accuracies"]


@pytest.mark.parametrize("weight", [0.0, 5.0, 50.0])
def test_dpop_is_model_zoos_formula(weight: float) -> None:
    tokens, reference, mask = _case(5)
    beta = 0.1
    ours, _ = _ours(
        tokens, reference, mask, beta=beta, loss_type="dpop", dpop_penalty_weight=weight
    )
    sums = (tokens * mask).sum(-1).tolist()
    refs = reference.tolist()
    expected = 0.0
    for i in range(B):  # Model Zoo's DPOLoss, one pair at a time
        pc, pr, rc, rr = sums[i], sums[B + i], refs[i], refs[B + i]
        logits = (pc - pr) - (rc - rr) - weight * max(rc - pc, 0.0)
        expected += -math.log(1 / (1 + math.exp(-beta * logits))) / B
    assert ours == pytest.approx(expected, rel=1e-12)
    if weight == 0.0:
        assert ours == pytest.approx(
            _trl(tokens, reference, mask, beta=beta, loss_type="sigmoid")[0]
        )
