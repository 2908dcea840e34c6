"""The single-token decode step and the prefill without a mask, against the full forward.

``test_generation_cache.py`` checks every family's cached logits against a recompute; these
cases reach what it does not: a second prompt chunk after cached tokens, several steps after a
left-padded prompt (the padding's mask reused), LoRA layers (called as modules inside the step),
bfloat16 (RoPE in float32, rounded once), the masks a step needs (none, a window as a key
range, sinks and padding as masks), and the step running on every step of ``generate``.
Float32 agrees to about 1e-6 (the tolerance is 1e-5).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.decoders import TINY_VOCAB, tiny_decoder, tiny_lora_decoder, token_ids

from plugtrain_models.generation import generate

ATOL = 1e-5


def _cached(lm: Any, ids: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    """Logits of ``ids`` fed as prompt chunks of ``chunks`` sizes, then one token at a time."""
    cache = lm.new_cache(ids.shape[0], ids.shape[1])
    out, at = [], 0
    for size in chunks + [1] * (ids.shape[1] - sum(chunks)):
        out.append(lm.decode(ids[:, at : at + size], cache))
        at += size
    return torch.cat(out, dim=1)


@pytest.mark.parametrize(
    "keys",
    [{}, {"attention_sliding_window_length": 4}, {"alibi": True}],
    ids=["plain", "window", "alibi"],
)
def test_a_second_prompt_chunk_and_the_steps_after_it_equal_the_forward(
    keys: dict[str, Any],
) -> None:
    if keys.pop("alibi", False):
        keys = {"position_embedding_type": "alibi"}
        lm = tiny_decoder(
            "bloom", **{**keys, "norm_type": "layernorm", "nonlinearity": "gelu"}
        ).model
    else:
        lm = tiny_decoder("mistral" if keys else "llama", **keys).model
    ids = token_ids(2, 18)
    with torch.no_grad():
        full = lm(ids)[0]
        cached = _cached(lm, ids, [6, 5])
    torch.testing.assert_close(cached, full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("window", [None, 3])
def test_steps_after_a_left_padded_prompt_equal_the_row_alone(window: int | None) -> None:
    lm = tiny_decoder("mistral", attention_sliding_window_length=window).model
    ids, pad = token_ids(2, 14), 5
    batch = ids.clone()
    batch[1, pad:] = ids[1, : 14 - pad]
    mask = torch.ones_like(batch)
    mask[1, :pad] = 0
    with torch.no_grad():
        cache = lm.new_cache(2, 14 + 6)
        lm.decode(batch, cache, mask)
        steps = torch.cat([lm.decode(ids[:, i : i + 1], cache) for i in range(6)], dim=1)
        alone = lm(torch.cat([ids[1:, : 14 - pad], ids[1:, :6]], dim=1))[0]
    assert cache.padded
    assert len(cache.plans) == 2
    torch.testing.assert_close(steps[1], alone[0, -6:], atol=ATOL, rtol=0)


def test_lora_layers_inside_the_step_compute_their_adapters() -> None:
    model = tiny_lora_decoder()
    lm, ids = model.model, token_ids(2, 12)
    with torch.no_grad():
        full = lm(ids)[0]
        cached = _cached(lm, ids, [4])
        plain = tiny_decoder().model(ids)[0]
    assert (full - plain).abs().max() > 1e-3  # the adapters change the logits
    torch.testing.assert_close(cached, full, atol=ATOL, rtol=0)


def test_bfloat16_steps_round_as_the_forward_does() -> None:
    lm = tiny_decoder().model.to(torch.bfloat16)
    ids = token_ids(2, 12)
    with torch.no_grad():
        full = lm(ids)[0].float()
        cached = _cached(lm, ids, [4]).float()
    # bfloat16 keeps 8 bits: the two paths' sums in other orders differ by a few of its ulps
    torch.testing.assert_close(cached, full, atol=0.05, rtol=0.02)
    assert (cached - full).abs().mean() < 0.01


def test_a_step_needs_a_mask_only_for_padding_alibi_or_sinks() -> None:
    def bias(family: str, length: int, window: int | None, **keys: Any) -> Any:
        lm = tiny_decoder(family, **keys).model
        cache = lm.new_cache(1, 16)
        with torch.no_grad():
            lm.decode(token_ids(1, length), cache)
        return lm._step_bias(cache, window)

    assert bias("llama", 9, None) == (None, 0)
    assert bias("mistral", 9, 4, attention_sliding_window_length=4) == (None, 5)
    assert bias("mistral", 3, 4, attention_sliding_window_length=4) == (None, 0)
    sinks, first = bias(
        "gpt-neox", 9, 4, attention_sliding_window_length=4, attention_sink_tokens=2,
        position_embedding_type="rotary", norm_type="layernorm", nonlinearity="gelu",
        attention_module="aiayn_attention", extra_attention_params={},
    )  # fmt: skip
    allowed = [0, 1, 5, 6, 7, 8]  # the sinks and the window's last 4 slots
    assert first == 0
    assert torch.equal(sinks[0, 0, 0] == 0, torch.isin(torch.arange(9), torch.tensor(allowed)))


def test_generate_runs_the_step_for_every_new_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from plugtrain_models.decode_step import LayerPlan

    calls = []
    original = LayerPlan.step

    def counted(self: LayerPlan, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LayerPlan, "step", counted)
    model = tiny_decoder()
    generated = generate(model, [[3, 4, 5], [6]], 5)
    assert [len(ids) for ids in generated] == [5, 5]
    assert len(calls) == 4 * 2  # every token after the prompt's first, every layer


PROMPT_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "rotary GQA (llama)": ("llama", {}),
    "window (mistral)": ("mistral", {"attention_sliding_window_length": 5}),
    "MoE (mixtral)": ("mixtral", {"moe": {"num_experts": 4, "top_k": 2}}),
    "softcaps, sandwich (gemma2)": (
        "gemma2",
        {
            "nonlinearity": "geglu",
            "norm_first_sandwich": True,
            "attention_sliding_window_length": 6,
            "sliding_window_every_other_decoder_layer": True,
            "attention_logit_softcapping": 5.0,
            "final_logit_softcapping": 3.0,
        },
    ),
    "parallel, untied norms (falcon)": ("falcon", {"use_untied_layer_norm": True}),
    "learned positions (gpt3)": (
        "gpt3",
        {
            "position_embedding_type": "learned",
            "norm_type": "layernorm",
            "nonlinearity": "gelu",
            "attention_module": "aiayn_attention",
            "extra_attention_params": {},
        },
    ),
}


@pytest.mark.parametrize(("family", "keys"), PROMPT_CASES.values(), ids=PROMPT_CASES.keys())
def test_a_prompts_last_logits_computed_alone_equal_the_forward(
    family: str, keys: dict[str, Any]
) -> None:
    """``last_only`` computes the last layer at the last position only; its keys all cached."""
    lm = tiny_decoder(family, **keys).model
    ids, pad = token_ids(2, 12), 3
    batch = ids.clone()
    batch[1, pad:] = ids[1, : 12 - pad]
    mask = torch.ones_like(batch)
    mask[1, :pad] = 0
    with torch.no_grad():
        cache = lm.new_cache(2, 13)
        last = lm.decode(ids, cache, last_only=True)
        following = lm.decode(ids[:, :1], cache)
        full = lm(torch.cat([ids, ids[:, :1]], dim=1))[0]
        padded = lm.decode(batch, lm.new_cache(2, 12), mask, last_only=True)
        alone = lm(ids[1:, : 12 - pad])[0]
    assert last.shape == (2, 1, TINY_VOCAB)
    torch.testing.assert_close(last[:, 0], full[:, -2], atol=ATOL, rtol=0)
    torch.testing.assert_close(following[:, 0], full[:, -1], atol=ATOL, rtol=0)
    torch.testing.assert_close(padded[1, 0], alone[0, -1], atol=ATOL, rtol=0)
