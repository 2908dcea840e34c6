"""The fused head's reused blocks and partial RoPE's in-place product give the plain values.

:func:`~plugtrain_models.head_loss.head_loss` keeps its CPU logits blocks from one call to the
next and scales its small products by each row's loss weight; partial RoPE copies each head
whole, then writes the turned pairs. Each is checked against the straightforward computation
(the head, ``cross_entropy``, autograd; pairwise rotation), in float32 and, for RoPE, bfloat16.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.head_loss import head_loss
from plugtrain_models.layers import apply_rotary, rotary_angles, rotary_phases


def _plain(
    hidden: torch.Tensor,
    head: nn.Linear,
    labels: torch.Tensor,
    mask: torch.Tensor,
    logits_scale: float | None,
    cap: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (``num_tokens``) and its per-token cross-entropy, through autograd."""
    logits = head(hidden)
    if logits_scale is not None:
        logits = logits * logits_scale
    if cap is not None:
        logits = cap * torch.tanh(logits / cap)
    ce = functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    m = mask.flatten().float()
    return (ce * m).sum() / m.sum(), ce


@pytest.mark.parametrize("bias", [False, True])
def test_calls_of_other_sizes_reusing_the_blocks_give_the_plain_loss_and_gradients(
    bias: bool, monkeypatch
) -> None:
    monkeypatch.setattr("plugtrain_models.head_loss._BLOCK_ELEMENTS", 4 * 40)  # 4 rows a block
    generator = torch.Generator().manual_seed(3)
    kept = []
    # a capped call (three blocks), then smaller and larger ones, another vocabulary, no cap
    for tokens, vocab, scale, cap in ((9, 40, 0.5, 4.0), (3, 40, None, None),
                                      (13, 40, None, 3.0), (11, 24, 2.0, None)):  # fmt: skip
        head = nn.Linear(16, vocab, bias=bias)
        hidden = torch.randn(1, tokens, 16, generator=generator, requires_grad=True)
        labels = torch.randint(0, vocab, (1, tokens), generator=generator)
        mask = (torch.rand(1, tokens, generator=generator) > 0.3).long()
        mask[0, 0] = 1
        loss, ce, _ = head_loss(
            hidden, head, labels, mask, scaling="num_tokens", weight=1.0, logits_scale=scale,
            cap=cap,
        )  # fmt: skip
        loss.backward()
        fused = [hidden.grad, *(p.grad for p in head.parameters())]
        hidden.grad = None
        head.zero_grad(set_to_none=True)
        plain_loss, plain_ce = _plain(hidden, head, labels, mask, scale, cap)
        plain_loss.backward()
        plain = [hidden.grad, *(p.grad for p in head.parameters())]
        torch.testing.assert_close(loss, plain_loss, atol=0, rtol=3e-7)
        torch.testing.assert_close(ce, plain_ce, atol=2e-6, rtol=0)
        for got, expected in zip(fused, plain, strict=True):
            torch.testing.assert_close(got, expected, atol=1e-6 * expected.abs().max(), rtol=0)
        kept.append((ce, ce.clone()))
    for ce, copy in kept:  # nothing a call returned lives in the blocks the next one reused
        assert torch.equal(ce, copy)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_partial_rope_turns_the_first_pairs_and_passes_the_rest(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(5)
    joined = torch.randn(2, 7, 3 * 4 * 12, generator=generator).to(dtype)
    x = joined[..., : 4 * 12].view(2, 7, 4, 12).requires_grad_()  # a view, as q out of q/k/v
    positions = torch.arange(7)
    cos, sin = rotary_angles(positions, 8, 1e4, "none", 1.0, {})
    got = apply_rotary(x, rotary_phases(positions, 8, 1e4, "none", 1.0, {}))
    pairs = x.detach()[..., :8].float().unflatten(-1, (4, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    turned = torch.stack((even * cos - odd * sin, odd * cos + even * sin), -1).flatten(-2)
    assert got.dtype == dtype
    assert got.is_contiguous()
    torch.testing.assert_close(got[..., :8], turned.to(dtype), atol=1e-6, rtol=0)
    assert torch.equal(got[..., 8:], x.detach()[..., 8:])
    gradient = torch.randn(got.shape, generator=generator).to(dtype)
    got.backward(gradient)
    g = gradient[..., :8].float().unflatten(-1, (4, 2))
    back = torch.stack((g[..., 0] * cos + g[..., 1] * sin, g[..., 1] * cos - g[..., 0] * sin), -1)
    torch.testing.assert_close(x.grad[..., :8], back.flatten(-2).to(dtype), atol=1e-6, rtol=0)
    assert torch.equal(x.grad[..., 8:], gradient[..., 8:])
