"""The decode step's in-place work: residuals, folded RMSNorm weights, one write per key/value.

A step adds the output and down projections to its input (``addmm_``), scales the stacked
query/key/value and gate/up weights by the RMSNorm weight in front of them (the norm then skips
its multiplication), and writes a token's key and value into the cache in one copy when the
cache holds them in one block. Each must give the forward's logits (float32, to about 1e-6;
the tolerance is 1e-5), with RMSNorm weights that are not all ones.
"""

from __future__ import annotations

from typing import Any

import torch
from support.decoders import tiny_decoder, token_ids
from torch import nn

from plugtrain_models.attention import LayerCache
from plugtrain_models.decode_fusion import fused_linear_step
from plugtrain_models.decode_step import LayerPlan, norm_step, rms_weight, stock_layer
from plugtrain_models.layers import RMSNorm

ATOL = 1e-5


def _lm() -> Any:
    """The tiny Llama with every RMSNorm weight drawn from U(0.5, 1.5)."""
    lm = tiny_decoder().model
    with torch.no_grad():
        for name, parameter in lm.named_parameters():
            if "norm" in name or "ln_f" in name:
                parameter.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(2))
    return lm


def _steps(lm: Any, ids: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
    """Logits of a 4-token prompt then one token at a time, and the cache."""
    cache = cache or lm.new_cache(ids.shape[0], ids.shape[1])
    out = [lm.decode(ids[:, :4], cache)]
    out += [lm.decode(ids[:, at : at + 1], cache) for at in range(4, ids.shape[1])]
    return torch.cat(out, dim=1), cache


def test_norm_weights_folded_into_the_stacked_products_give_the_forwards_logits() -> None:
    lm, ids = _lm(), token_ids(2, 12)
    with torch.no_grad():
        logits, cache = _steps(lm, ids)
        torch.testing.assert_close(logits, lm(ids)[0], atol=ATOL, rtol=0)
    layer, plan = lm.transformer_decoder.layers[1], cache.plans[1]
    attention = layer.self_attn
    stacked = torch.cat([
        attention.proj_q_dense_layer.weight, attention.proj_k_dense_layer.weight,
        attention.proj_v_dense_layer.weight,
    ]).t()  # fmt: skip
    gain = 64**0.5  # the width: the step divides by hypot(||x||, sqrt(width * eps))
    assert torch.equal(
        plan.qkv.weight_t, stacked * (layer.norm1.weight.detach().unsqueeze(1) * gain)
    )
    ffn = layer.ffn.ffn[0]
    gate_up = torch.cat([ffn.linear_layer_for_glu.weight, ffn.linear_layer.weight]).t()
    assert torch.equal(
        plan.glu.weight_t, gate_up * (layer.norm3.weight.detach().unsqueeze(1) * gain)
    )


def test_a_norm_weight_written_in_place_is_folded_again() -> None:
    lm, ids = _lm(), token_ids(1, 10)
    with torch.no_grad():
        before, cache = _steps(lm, ids)
        old = cache.plans[0].qkv
        lm.transformer_decoder.layers[0].norm1.weight.mul_(1.5)
        after, cache = _steps(lm, ids)
        full = lm(ids)[0]
    assert cache.plans[0].qkv is not old
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, full, atol=ATOL, rtol=0)


def test_keys_and_values_in_separate_blocks_are_written_one_at_a_time() -> None:
    lm, ids = _lm(), token_ids(2, 12)
    cache = lm.new_cache(2, 12)
    cache.layers = [LayerCache(c.keys.clone(), c.values.clone()) for c in cache.layers]
    with torch.no_grad():
        apart, cache = _steps(lm, ids, cache)
        together, _ = _steps(lm, ids)
    assert all(plan._kv is None for plan in cache.plans)
    torch.testing.assert_close(apart, together, atol=0, rtol=0)


def test_a_step_adds_to_its_input_in_place_and_records_no_graph() -> None:
    lm, ids = _lm(), token_ids(2, 8)
    layer = lm.transformer_decoder.layers[0]
    cache = lm.new_cache(2, 8)
    with torch.no_grad():
        lm.decode(ids[:, :7], cache)
        cache.append(1)
        hidden = torch.randn(2, 64)
        plan = LayerPlan(layer)
        assert plan.step(hidden, cache.layers[0], None, cache.rotary[7:8].view(1, 1, -1)) is hidden
        assert stock_layer(layer)
        full = lm(ids)[0]
    assert not stock_layer(layer)  # with autograd, the layers' own forward runs
    steps, cache = _steps(lm, ids)
    assert not cache.plans
    assert steps.requires_grad
    torch.testing.assert_close(steps.detach(), full, atol=ATOL, rtol=0)


def test_the_steps_rmsnorm_is_the_modules_where_eps_matters_too() -> None:
    torch.manual_seed(0)
    norm = RMSNorm(64, eps=1e-2)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        x = torch.randn(3, 64) * torch.tensor([[1e-2], [1.0], [30.0]])  # eps dominant to none
        expected = norm(x)
        torch.testing.assert_close(norm_step(norm)(x), expected, atol=0, rtol=2e-6)
        weight, gain = rms_weight(norm) or (None, 0.0)
        assert weight is norm.weight
        unweighted = norm_step(norm, weighted=False)(x)
        torch.testing.assert_close(unweighted * weight * gain, expected, atol=0, rtol=2e-6)


def test_a_stacked_product_with_a_scale_writes_the_scaled_inputs_products_into_out() -> None:
    torch.manual_seed(0)
    first, second, scale = nn.Linear(8, 5), nn.Linear(8, 3), torch.rand(8) + 0.5
    x, out = torch.randn(2, 8), torch.empty(2, 8)
    with torch.no_grad():
        product = fused_linear_step([first, second], scale, 2.0)
        assert product is not None
        assert product(x, out) is out
        expected = torch.cat([first(x * scale * 2.0), second(x * scale * 2.0)], dim=1)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
        assert fused_linear_step([first, second], scale, 2.0) is product
        assert fused_linear_step([first, second], scale, 3.0) is not product  # another gain
        assert fused_linear_step([first, second], scale.double()) is None
