"""The decode step's fused projections: the unfused step's logits and ids, LoRA and MoE as before.

``LayerPlan.fuse`` computes a layer's query, key and value projections as one product, and a
GLU's gate and up projections as another, over stacked weights stored transposed. Each output
column is the separate product's dot product summed in another order, so both steps agree to
float32 rounding (about 1e-7 here; the tolerance is 2e-6); the stacked weights are kept per
module and rebuilt when a weight changes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.decoders import tiny_decoder, tiny_lora_decoder, token_ids
from torch import nn

from plugtrain_models import decode_fusion
from plugtrain_models.decode_fusion import fused_linear_step
from plugtrain_models.decode_step import LayerPlan
from plugtrain_models.generation import generate

ATOL = 2e-6


def _steps(lm: Any, ids: torch.Tensor) -> tuple[torch.Tensor, list[LayerPlan]]:
    """Logits of a 4-token prompt then one token at a time, and the cache's plans."""
    cache = lm.new_cache(ids.shape[0], ids.shape[1])
    with torch.no_grad():
        out = [lm.decode(ids[:, :4], cache)]
        out += [lm.decode(ids[:, at : at + 1], cache) for at in range(4, ids.shape[1])]
    return torch.cat(out, dim=1), cache.plans


def _unfused(lm: Any, ids: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    with monkeypatch.context() as patch:
        patch.setattr(LayerPlan, "fuse", False)
        logits, plans = _steps(lm, ids)
    assert all(plan.qkv is None for plan in plans)
    return logits


GPT2 = {"position_embedding_type": "fixed", "norm_type": "layernorm", "nonlinearity": "gelu"}
CASES = {
    "llama": ("llama", {}),
    "biases (gpt2)": ("gpt2", GPT2),
    "geglu, sandwich (gemma2)": (
        "gemma2", {"nonlinearity": "geglu", "norm_first_sandwich": True},
    ),
    "MoE (mixtral)": ("mixtral", {"moe": {"num_experts": 4, "top_k": 2}}),
}  # fmt: skip


@pytest.mark.parametrize(("family", "keys"), CASES.values(), ids=CASES.keys())
def test_fused_steps_give_the_unfused_steps_logits(
    family: str, keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    lm, ids = tiny_decoder(family, **keys).model, token_ids(2, 12)
    fused, plans = _steps(lm, ids)
    assert all(plan.qkv is not None for plan in plans)
    torch.testing.assert_close(fused, _unfused(lm, ids, monkeypatch), atol=ATOL, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(fused, lm(ids)[0], atol=1e-5, rtol=0)


def test_generate_writes_the_unfusedtoken_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_decoder()
    prompts = [[3, 1, 4, 1, 5], [9, 2]]
    fused = generate(model, prompts, 12)
    with monkeypatch.context() as patch:
        patch.setattr(LayerPlan, "fuse", False)
        assert generate(model, prompts, 12) == fused
    assert all(len(ids) == 12 for ids in fused)


def test_lora_projections_stay_their_modules_and_compute_their_adapters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = tiny_lora_decoder()
    lm, ids = model.model, token_ids(2, 12)
    fused, plans = _steps(lm, ids)
    assert all(plan.qkv is None for plan in plans)  # the adapted projections are not stacked
    with torch.no_grad():
        torch.testing.assert_close(fused, lm(ids)[0], atol=1e-5, rtol=0)


def test_stacked_weights_are_kept_until_a_weight_changes() -> None:
    torch.manual_seed(0)
    first, second = nn.Linear(8, 5), nn.Linear(8, 3)
    x = torch.randn(2, 8)
    step = fused_linear_step([first, second])
    assert step is not None
    assert fused_linear_step([first, second]) is step
    with torch.no_grad():
        expected = torch.cat([first(x), second(x)], dim=1)
        torch.testing.assert_close(step(x), expected, atol=ATOL, rtol=0)
        second.weight.mul_(2.0)  # an in-place write, as an optimizer step or a load does
        changed = fused_linear_step([first, second])
        assert changed is not None
        assert changed is not step
        torch.testing.assert_close(changed(x)[:, 5:], second(x), atol=ATOL, rtol=0)
        first.weight = nn.Parameter(torch.zeros(5, 8))  # another tensor
        replaced = fused_linear_step([first, second])
        assert replaced is not None
        torch.testing.assert_close(replaced(x)[:, :5], first.bias.expand(2, 5), atol=0, rtol=0)
        second.weight.data = torch.ones(3, 8)  # the same parameter over another storage
        swapped = fused_linear_step([first, second])
        assert swapped is not None
        assert swapped is not replaced
        torch.testing.assert_close(swapped(x)[:, 5:], second(x), atol=ATOL, rtol=0)


def test_only_stock_linears_alike_are_stacked() -> None:
    assert fused_linear_step([nn.Linear(8, 4), nn.Linear(8, 4, bias=False)]) is None
    assert fused_linear_step([nn.Linear(8, 4), nn.Linear(6, 4)]) is None
    assert fused_linear_step([nn.Linear(8, 4), nn.Linear(8, 4).double()]) is None
    assert fused_linear_step([nn.Linear(8, 4), nn.Sequential(nn.Linear(8, 4))]) is None
    assert fused_linear_step([]) is None


def test_a_group_too_large_to_be_worth_a_copy_is_not_stacked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = [nn.Linear(8, 4), nn.Linear(8, 4)]
    at_limit = sum(t.numel() * t.element_size() for m in group for t in m.parameters())
    monkeypatch.setattr(decode_fusion, "MAX_STACKED_BYTES", at_limit)
    assert fused_linear_step(group) is not None
    monkeypatch.setattr(decode_fusion, "MAX_STACKED_BYTES", at_limit - 1)
    assert fused_linear_step([nn.Linear(8, 4), nn.Linear(8, 4)]) is None
