"""The decoder's fast paths compute what the plain formulas compute.

RoPE as one complex product, MoE routing grouped by expert, soft-capped attention without
repeating grouped k/v, the cross-entropy a block of rows at a time (its gradient in the logits'
memory), RMSNorm's own backward, the final soft cap over its input's memory, and metrics only when
asked: each is checked against the straightforward formula it replaces (written out here or
torch's own), on tiny random decoders in float32.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from plugtrain_models.attention import Attention
from plugtrain_models.families import build_decoder
from plugtrain_models.ffn import route
from plugtrain_models.layers import RMSNorm, apply_rotary, rotary_angles, rotary_phases, soft_cap
from plugtrain_models.loss import TokenCrossEntropy, masked_accuracy
from plugtrain_models.model import DecoderLM

ROTARY = {  # no dropout: a training forward is then a function of the weights and the batch
    "dropout_rate": 0.0, "attention_dropout_rate": 0.0, "embedding_dropout_rate": 0.0,
    "vocab_size": 96, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 2,
    "max_position_embeddings": 32, "filter_size": 96, "position_embedding_type": "rotary",
    "rotary_dim": 16, "norm_type": "rmsnorm", "nonlinearity": "swiglu",
    "attention_module": "multiquery_attention", "extra_attention_params": {"num_kv_groups": 2},
}  # fmt: skip
MOE = {**ROTARY, "moe": {"num_experts": 4, "top_k": 2}}
GEMMA2 = {
    **ROTARY, "nonlinearity": "geglu", "norm_first_sandwich": True, "embeddings_scale": 8.0,
    "attention_sliding_window_length": 6, "sliding_window_every_other_decoder_layer": True,
    "attention_logit_softcapping": 5.0, "final_logit_softcapping": 3.0,
}  # fmt: skip


def _batch(seed: int = 0, vocab: int = 96) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, vocab, (2, 17), generator=torch.Generator().manual_seed(seed))
    return {
        "input_ids": ids[:, :-1],
        "labels": ids[:, 1:],
        "attention_mask": torch.ones(2, 16, dtype=torch.long),
    }


def _model(family: str, keys: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    return build_decoder(family, keys)


def _rotary_by_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on interleaved pairs written out: ``(a cos - b sin, b cos + a sin)``."""
    half = cos.shape[-1]
    pairs = x[..., : 2 * half].float().unflatten(-1, (half, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    out = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return torch.cat((out.flatten(-2).to(x.dtype), x[..., 2 * half :]), dim=-1)


@pytest.mark.parametrize("rotary_dim", [16, 4])
@pytest.mark.parametrize("stored_width", [16, 21])  # 21: a view with odd strides (copied)
def test_rope_as_a_complex_product_is_the_pairwise_rotation(
    rotary_dim: int, stored_width: int
) -> None:
    stored = torch.randn(2, 11, 3, stored_width, generator=torch.Generator().manual_seed(0))
    x = stored[..., :16]
    positions = torch.arange(11)
    cos, sin = rotary_angles(positions, rotary_dim, 1e4, "none", 1.0, {})
    phases = rotary_phases(positions, rotary_dim, 1e4, "none", 1.0, {})
    ours = stored.clone().requires_grad_()  # rotated as a view of its first 16 dims
    plain = x.clone().requires_grad_()
    got, expected = apply_rotary(ours[..., :16], phases), _rotary_by_pairs(plain, cos, sin)
    # the same products and sums; a vectorised complex product may fuse one multiply-add,
    # so the two agree to an ulp of values of order 1 (exactly, in practice, on whole heads)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    gradient = torch.randn_like(got)
    got.backward(gradient)
    expected.backward(gradient)
    torch.testing.assert_close(ours.grad[..., :16], plain.grad, atol=1e-6, rtol=0)
    assert not ours.grad[..., 16:].any()
    assert torch.equal(got[..., rotary_dim:], x[..., rotary_dim:])  # the rest passes through


def _moe_by_expert_masks(
    tokens: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, modules: nn.ModuleList
) -> torch.Tensor:
    """Every expert over the tokens a boolean mask picks, accumulated in expert order."""
    top_k = experts.numel() // tokens.shape[0]
    chosen, weights = experts.view(-1, top_k), weights.view(-1, top_k)
    out = torch.zeros_like(tokens)
    for index, module in enumerate(modules):
        routed = (chosen == index).any(-1)
        if routed.any():
            weight = (weights * (chosen == index)).sum(-1)[routed].unsqueeze(-1)
            out[routed] += weight * module(tokens[routed])
    return out


def test_moe_routing_grouped_by_expert_is_the_per_expert_loop() -> None:
    model = _model("mixtral", MOE)
    moe = model.model.transformer_decoder.layers[0].ffn
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randn(40, 64, generator=generator)
    # two different experts per token, in no particular order, never expert 2 (which then
    # runs on no token)
    draws = torch.rand(40, 3, generator=generator).argsort(-1)[:, :2]
    experts = torch.tensor([0, 1, 3])[draws]
    chosen = torch.softmax(torch.randn(40, 2, generator=generator), -1)
    modules = moe.experts.experts
    ours = tokens.clone().requires_grad_()
    plain = tokens.clone().requires_grad_()
    got = route(ours, chosen.reshape(-1), experts.reshape(-1), modules)
    expected = _moe_by_expert_masks(plain, chosen.reshape(-1), experts.reshape(-1), modules)
    # each token adds its experts' results in the same (expert) order: the same float32 sums
    assert torch.equal(got, expected)
    got.sum().backward()
    first = [p.grad for p in modules.parameters()]
    modules.zero_grad(set_to_none=True)
    expected.sum().backward()
    for mine, theirs in zip(first, [p.grad for p in modules.parameters()], strict=True):
        if theirs is None:  # expert 2's weights: run by neither
            assert mine is None
        else:  # the same products; the batch's gradients summed in another order
            torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours.grad, plain.grad, atol=1e-6, rtol=1e-5)


def test_soft_capped_attention_without_repeated_kv_is_the_plain_formula() -> None:
    model = _model("gemma2", GEMMA2)
    attention: Attention = model.model.transformer_decoder.layers[0].self_attn
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 9, 16, generator=generator)
    k, v = (
        torch.randn(2, 2, 9, 16, generator=generator),
        torch.randn(2, 2, 9, 16, generator=generator),
    )
    bias = torch.zeros(9, 9).masked_fill(torch.ones(9, 9).triu(1).bool(), float("-inf"))
    got = attention._capped(q, k, v, bias[None, None])
    k2, v2 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = (q @ k2.transpose(-1, -2)) * attention.scale
    scores = attention.cap * torch.tanh(scores / attention.cap) + bias
    expected = torch.softmax(scores, dim=-1) @ v2
    # scale / cap is folded into one factor: float32 round-off of order 1e-7 on values ~1
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("scaling", ["num_tokens", "batch_size"])
def test_training_computes_metrics_only_when_asked_and_evaluation_always(scaling: str) -> None:
    weight = {"loss_weight": 0.5} if scaling == "batch_size" else {}
    model = _model("llama", {**ROTARY, "loss_scaling": scaling, **weight}).train()
    batch = _batch()
    asked = model(batch)
    model.metrics_wanted = False
    quiet = model(batch)
    assert set(quiet) == {"loss", "num_examples"}
    assert torch.equal(quiet["loss"], asked["loss"])
    assert quiet["num_examples"] == asked["num_examples"] == 32
    logits = model.logits(batch["input_ids"])
    accuracy = (logits.argmax(-1) == batch["labels"]).float().mean()
    torch.testing.assert_close(asked["accuracy"], accuracy)
    assert ("token_loss" in asked) == (scaling == "batch_size")
    model.eval()
    assert {"loss", "accuracy", "num_examples"} <= set(model(batch))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_blockwise_cross_entropy_is_torch_s(dtype: torch.dtype, monkeypatch) -> None:
    monkeypatch.setattr("plugtrain_models.loss._BLOCK_ELEMENTS", 3 * 50)  # 3 rows a block
    generator = torch.Generator().manual_seed(3)
    logits = (torch.randn(10, 50, generator=generator) * 4).to(dtype)
    labels = torch.randint(0, 50, (10,), generator=generator)
    row_grads = torch.rand(10, generator=generator)  # a masked mean's weights, say
    ours = logits.clone().requires_grad_()
    plain = logits.clone().requires_grad_()
    got = TokenCrossEntropy.apply(ours, labels)
    expected = nn.functional.cross_entropy(plain.float(), labels, reduction="none")
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)  # the same log-softmax kernel, a block at a time
    (got * row_grads).sum().backward()
    (expected * row_grads).sum().backward()
    assert ours.grad.dtype == dtype
    # float32 gradients agree to round-off; bfloat16 ones are both a float32 value rounded to
    # 8 bits, so they may differ by one bfloat16 ulp (2^-8 relative)
    tolerance = (
        {"atol": 1e-7, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-4, "rtol": 8e-3}
    )
    torch.testing.assert_close(ours.grad, plain.grad, **tolerance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_accuracy_takes_the_first_largest_logit_as_argmax_does(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(4)
    logits = torch.randint(0, 3, (6, 40, 7), generator=generator).to(dtype)  # many ties
    labels = torch.randint(0, 7, (6, 40), generator=generator)
    mask = (torch.rand(6, 40, generator=generator) > 0.3).long()
    hits = (logits.argmax(-1) == labels).float() * mask
    assert masked_accuracy(logits, labels, mask) == hits.sum() / mask.sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cross_entropy_may_leave_the_gradient_in_the_logits_memory(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(5)
    weights = torch.randn(8, 40, generator=generator)
    hidden = torch.randn(12, 8, generator=generator)
    labels = torch.randint(0, 40, (12,), generator=generator)
    grads = []
    for overwrite in (False, True):
        head = weights.clone().requires_grad_()
        logits = (hidden @ head).to(dtype)
        loss = TokenCrossEntropy.apply(logits, labels, overwrite).mean()
        loss.backward(retain_graph=True)
        grads.append(head.grad)
        if overwrite:  # the logits now hold their gradient: a second backward refuses them
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                loss.backward()
        else:
            loss.backward()
    assert torch.equal(grads[0] / 2, grads[1])  # the first one accumulated twice


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_s_own_backward_is_autograd_s(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(6)
    norm = RMSNorm(24, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(24, generator=generator) + 0.5)
    x = (torch.randn(3, 5, 24, generator=generator) * 3).to(dtype)
    upstream = torch.randn(3, 5, 24, generator=generator).to(dtype)
    ours, plain = x.clone().requires_grad_(), x.clone().requires_grad_()
    weight = norm.weight.detach().clone().requires_grad_()
    got = norm(ours)
    wide = plain.float()
    expected = (weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-5))).to(dtype)
    assert got.dtype == dtype
    assert torch.equal(got, expected)  # the forward is the formula's, bit for bit
    got.backward(upstream)
    expected.backward(upstream)
    # the same float32 gradient, summed in another order: round-off, then the input's rounding
    tolerance = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(ours.grad, plain.grad, **tolerance)
    torch.testing.assert_close(norm.weight.grad, weight.grad, atol=1e-5, rtol=1e-5)
    (first,) = torch.autograd.grad((norm(ours) * upstream).sum(), ours, create_graph=True)
    with pytest.raises(RuntimeError, match="does not require grad"):  # not silently wrong
        first.sum().backward()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_final_soft_cap_is_the_formula_and_reuses_only_its_input(
    dtype: torch.dtype, monkeypatch
) -> None:
    monkeypatch.setattr("plugtrain_models.layers._CAP_BLOCK_ELEMENTS", 2 * 30)  # 2 rows a block
    generator = torch.Generator().manual_seed(7)
    weights = torch.randn(8, 30, generator=generator) * 3
    hidden = torch.randn(2, 5, 8, generator=generator)
    upstream = torch.randn(2, 5, 30, generator=generator)
    ours, plain = weights.clone().requires_grad_(), weights.clone().requires_grad_()
    got = soft_cap((hidden @ ours).to(dtype), 4.0)
    expected = 4.0 * torch.tanh((hidden @ plain).to(dtype) / 4.0)
    assert torch.equal(got, expected)  # the same three roundings, bit for bit
    got.backward(upstream.to(dtype), retain_graph=True)
    expected.backward(upstream.to(dtype))
    tolerance = (
        {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 2e-2}
    )
    torch.testing.assert_close(ours.grad, plain.grad, **tolerance)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        got.backward(upstream.to(dtype))  # its input now holds the gradient: refused


def _loss_and_grads(model: Any, batch: dict[str, torch.Tensor], factor: float = 1.0) -> Any:
    model.zero_grad(set_to_none=True)
    result = model(batch)
    (result["loss"] * factor).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return {key: value.detach() for key, value in result.items() if key != "num_examples"}, grads


@pytest.mark.parametrize(
    ("family", "keys"),
    [
        ("llama", ROTARY),
        ("gemma2", {**GEMMA2, "output_logits_scale": 0.5}),  # soft cap, scale, tied head
        ("llama", {**ROTARY, "loss_scaling": "batch_size", "loss_weight": 0.5,
                   "use_bias_in_output": True}),
    ],
)  # fmt: skip
def test_the_fused_head_and_loss_is_the_unfused_pair(family: str, keys: Any, monkeypatch) -> None:
    monkeypatch.setattr("plugtrain_models.head_loss._BLOCK_ELEMENTS", 5 * 96)  # 5 rows a block
    model = _model(family, keys).train()
    batch = _batch()
    with torch.no_grad():  # the model's own guesses in row 0: an accuracy of about a half
        batch["labels"] = batch["labels"].clone()
        batch["labels"][0] = model.logits(batch["input_ids"])[0].argmax(-1)
    batch["labels"][0, :3] = -100  # unscored
    for factor, metrics in ((1.0, True), (0.25, False)):  # upstream gradients of 1 and not
        model.metrics_wanted = metrics
        fused_values, fused = _loss_and_grads(model, batch, factor)
        monkeypatch.setattr(DecoderLM, "_fusable", lambda self: False)
        plain_values, plain = _loss_and_grads(model, batch, factor)
        monkeypatch.undo()
        monkeypatch.setattr("plugtrain_models.head_loss._BLOCK_ELEMENTS", 5 * 96)
        assert fused_values.keys() == plain_values.keys()
        for key, value in plain_values.items():  # loss, accuracy, token_loss: the same kernels
            assert torch.equal(fused_values[key], value), key
        assert not metrics or 0.3 < plain_values["accuracy"] < 0.7
        assert fused.keys() == plain.keys()
        for name, grad in plain.items():  # float32 round-off (the head's weight summed by block)
            torch.testing.assert_close(fused[name], grad, atol=1e-6 * grad.abs().max(), rtol=0)


def test_a_hooked_head_or_autocast_takes_the_unfused_path() -> None:
    model = _model("llama", ROTARY).train()
    model.metrics_wanted = False
    seen = []
    handle = model.model.lm_head.register_forward_hook(lambda *args: seen.append(args[2]))
    model(_batch())["loss"].backward()
    assert len(seen) == 1  # a hook (LoRA's, FSDP's) sees the head run
    handle.remove()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        quiet = model(_batch())["loss"]
    model.metrics_wanted = True
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(quiet, model(_batch())["loss"])


@pytest.mark.parametrize("bias", [False, True])
def test_q_k_v_as_one_matmul_is_three(bias: bool, monkeypatch) -> None:
    model = _model("llama", {**ROTARY, "use_projection_bias_in_attention": bias}).train()
    attention = model.model.transformer_decoder.layers[0].self_attn
    assert (attention.proj_q_dense_layer.bias is not None) == bias
    hidden = torch.randn(4, 16, 64, generator=torch.Generator().manual_seed(8))
    runs = []
    for joined_from in (64, 10**9):  # 64 tokens: joined; else the three projections
        monkeypatch.setattr("plugtrain_models.attention._JOINED_TOKENS", joined_from)
        x = hidden.clone().requires_grad_()
        attention.zero_grad(set_to_none=True)
        out = attention(x, None, None)
        out.backward(torch.ones_like(out))
        grads = [p.grad for p in attention.parameters()]
        runs.append((out.detach(), x.grad, grads))
    (joined, joined_x, joined_w), (three, three_x, three_w) = runs
    torch.testing.assert_close(joined, three, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(joined_x, three_x, atol=1e-6, rtol=1e-5)
    for a, b in zip(joined_w, three_w, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_fused_head_and_loss_gives_its_gradients_once() -> None:
    model = _model("llama", ROTARY).train()
    model.metrics_wanted = False
    loss = model(_batch())["loss"]
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="computes its gradients once"):  # not twice, wrongly
        loss.backward()
