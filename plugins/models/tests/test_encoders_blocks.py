"""The shared blocks against torch's own layers and against explicit formulas.

The encoder layer equals ``torch.nn.TransformerEncoderLayer`` (post-LN and pre-LN, key-padding
mask) with the same weights; cross-attention, T5's unscaled scores with a position bias, rotary
positions and the masks against written-out attention.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from plugtrain_models.blocks.attention import MultiheadAttention, score_scale
from plugtrain_models.blocks.encoder import TransformerEncoder
from plugtrain_models.blocks.encoder_layer import TransformerEncoderLayer
from plugtrain_models.blocks.masks import additive_mask, causal_mask, key_padding_mask, vsl_mask
from plugtrain_models.layers import rotary_phases

H, NH, F = 32, 4, 64
ATOL, RTOL = 1e-5, 1e-5


def _randomise(module: nn.Module, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * 0.2
            parameter.copy_(noise + 1 if "norm" in name and name.endswith("weight") else noise)


def _torch_layer(ours: TransformerEncoderLayer, norm_first: bool) -> nn.TransformerEncoderLayer:
    """torch's layer carrying ``ours``' weights (in-projection stacked as q, k, v)."""
    theirs = nn.TransformerEncoderLayer(
        H, NH, F, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first
    ).eval()
    attn = ours.self_attn
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(
            torch.cat([attn.proj_q_dense_layer.weight, attn.proj_k_dense_layer.weight,
                       attn.proj_v_dense_layer.weight])
        )  # fmt: skip
        theirs.self_attn.in_proj_bias.copy_(
            torch.cat([attn.proj_q_dense_layer.bias, attn.proj_k_dense_layer.bias,
                       attn.proj_v_dense_layer.bias])
        )  # fmt: skip
        theirs.self_attn.out_proj.load_state_dict(attn.proj_output_dense_layer.state_dict())
        theirs.linear1.load_state_dict(ours.ffn.ffn[0].linear_layer.state_dict())
        theirs.linear2.load_state_dict(ours.ffn.ffn[1].linear_layer.state_dict())
        theirs.norm1.load_state_dict(ours.norm1.state_dict())
        theirs.norm2.load_state_dict(ours.norm2.state_dict())
    return theirs


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first: bool) -> None:
    torch.manual_seed(0)
    ours = TransformerEncoderLayer(H, NH, F, dropout=0.0, norm_first=norm_first).eval()
    _randomise(ours)
    theirs = _torch_layer(ours, norm_first)
    x = torch.randn(2, 7, H)
    padding = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    got = ours(x, key_padding_mask(padding))
    want = theirs(x, src_key_padding_mask=padding == 0)
    torch.testing.assert_close(got[0], want[0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got[1, :4], want[1, :4], atol=ATOL, rtol=RTOL)


def test_parameter_names() -> None:
    layer = TransformerEncoderLayer(H, NH, F, use_projection_bias=False, use_output_bias=False)
    names = {n for n, _ in layer.named_parameters()}
    assert names == {
        *(f"self_attn.proj_{p}_dense_layer.weight" for p in "qkv"),
        "self_attn.proj_output_dense_layer.weight",
        *(f"ffn.ffn.{i}.linear_layer.{w}" for i in (0, 1) for w in ("weight", "bias")),
        *(f"norm{i}.{w}" for i in (1, 2) for w in ("weight", "bias")),
    }
    rms = TransformerEncoderLayer(H, NH, F, norm_type="rmsnorm", use_ffn_bias=False)
    assert "norm1.bias" not in dict(rms.named_parameters())
    assert "ffn.ffn.0.linear_layer.bias" not in dict(rms.named_parameters())


def _reference(
    attn: MultiheadAttention,
    query: torch.Tensor,
    source: torch.Tensor,
    bias: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Written-out attention: heads, ``q k^T * scale + bias``, softmax, ``@ v``, output."""
    batch, length, _ = query.shape

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(batch, t.shape[1], attn.num_heads, attn.head_dim).transpose(1, 2)

    q = heads(attn.proj_q_dense_layer(query))
    k = heads(attn.proj_k_dense_layer(source))
    v = heads(attn.proj_v_dense_layer(source))
    probabilities = torch.softmax(q @ k.transpose(-1, -2) * scale + bias, dim=-1)
    merged = (probabilities @ v).transpose(1, 2).reshape(batch, length, -1)
    out: torch.Tensor = attn.proj_output_dense_layer(merged)
    return out


def test_cross_attention_with_position_bias_and_unscaled_scores() -> None:
    """T5's shape: inner width != model width, other key/value width and length, no scale."""
    torch.manual_seed(1)
    attn = MultiheadAttention(
        H, NH, head_dim=6, kv_dim=20, use_projection_bias=False, use_output_bias=False,
        scale=score_scale(6, "none"), logits_alpha=2.0,
    ).eval()  # fmt: skip
    assert attn.proj_q_dense_layer.weight.shape == (24, H)
    assert attn.proj_k_dense_layer.weight.shape == (24, 20)
    query, source = torch.randn(2, 5, H), torch.randn(2, 9, 20)
    position_bias = torch.randn(1, NH, 5, 9)
    keys = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    mask = key_padding_mask(keys)
    got = attn(query, source, mask=mask, position_bias=position_bias)
    want = _reference(attn, query, source, position_bias + additive_mask(mask), 2.0)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    additive = attn(query, source, mask=additive_mask(mask), position_bias=position_bias)
    torch.testing.assert_close(additive, want, atol=ATOL, rtol=RTOL)


def test_scales() -> None:
    assert score_scale(16, "sqrt_d") == 0.25
    assert score_scale(16, "d") == 1 / 16
    assert score_scale(16, "none") == 1.0
    torch.manual_seed(2)
    attn = MultiheadAttention(H, NH, scale=score_scale(8, "d"), logits_alpha=3.0).eval()
    x = torch.randn(1, 4, H)
    want = _reference(attn, x, x, torch.zeros(1, 1, 4, 4), 3.0 / 8)
    torch.testing.assert_close(attn(x), want, atol=ATOL, rtol=RTOL)


def test_rotary_rotates_interleaved_pairs() -> None:
    torch.manual_seed(3)
    attn = MultiheadAttention(H, NH).eval()
    x = torch.randn(2, 6, H)
    phases = rotary_phases(torch.arange(6), 8, 10000.0, "linear", 1.0, {})
    got = attn(x, rotary=phases)

    def rotate(t: torch.Tensor) -> torch.Tensor:  # [B, S, nh, d], pairs (2i, 2i+1)
        angles = torch.arange(6)[:, None] * 10000.0 ** (-torch.arange(0, 8, 2) / 8)
        cos, sin = angles.cos()[None, :, None], angles.sin()[None, :, None]
        a, b = t[..., 0::2], t[..., 1::2]
        return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)

    q = rotate(attn.proj_q_dense_layer(x).view(2, 6, NH, 8)).transpose(1, 2)
    k = rotate(attn.proj_k_dense_layer(x).view(2, 6, NH, 8)).transpose(1, 2)
    v = attn.proj_v_dense_layer(x).view(2, 6, NH, 8).transpose(1, 2)
    probabilities = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    want = attn.proj_output_dense_layer((probabilities @ v).transpose(1, 2).reshape(2, 6, H))
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


def test_vsl_mask_is_block_diagonal() -> None:
    """Two rows: sequences of 3 and 2 tokens, and one of 4 then one padding token."""
    span = torch.tensor([[2, 1, 0, 1, 0], [3, 2, 1, 0, 0]])
    position = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]])
    mask = vsl_mask(span, position)
    assert mask.shape == (2, 1, 5, 5)
    first = torch.zeros(5, 5, dtype=torch.bool)
    first[:3, :3] = first[3:, 3:] = True
    second = torch.zeros(5, 5, dtype=torch.bool)
    second[:4, :4] = second[4, 4] = True
    assert torch.equal(mask[0, 0], first)
    assert torch.equal(mask[1, 0], second)


def test_causal_and_padding_masks() -> None:
    assert torch.equal(causal_mask(3)[0, 0], torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())
    padding = key_padding_mask(torch.tensor([[1, 1, 0]]))
    assert padding.shape == (1, 1, 1, 3)
    assert padding.tolist() == [[[[True, True, False]]]]
    assert additive_mask(padding)[0, 0, 0].tolist() == [0.0, 0.0, float("-inf")]


def test_encoder_stack_applies_final_norm() -> None:
    torch.manual_seed(4)
    layers = [TransformerEncoderLayer(H, NH, F, dropout=0.0, norm_first=True) for _ in range(2)]
    stack = TransformerEncoder(layers, nn.LayerNorm(H)).eval()
    x = torch.randn(1, 4, H)
    want = stack.norm(layers[1](layers[0](x)))
    torch.testing.assert_close(stack(x), want)
    assert "norm.weight" in dict(stack.named_parameters())
