"""The KV cache: cached decoding gives the logits of a full recompute, for every family.

Each case is a tiny decoder with random weights (its own initialisation, seeded). A sequence is
fed as a prompt chunk then one token at a time through ``decode`` with a cache; the logits of
every position must equal ``forward`` on the whole sequence. A batch with left padding must
give each row the logits of that row alone. Float32 on CPU: the two paths add the same numbers
in a different order, so they agree to about 1e-6 (the tolerance below is 1e-5).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.decoders import LLAMA_LAYOUT

from plugtrain_models.families import build_decoder

V, H, NH, L, P = 96, 64, 4, 2, 48
SHARED = {
    "vocab_size": V,
    "hidden_size": H,
    "num_heads": NH,
    "num_hidden_layers": L,
    "max_position_embeddings": P,
    "filter_size": 96,
}

GEMMA2 = {
    **LLAMA_LAYOUT,
    "nonlinearity": "geglu",
    "norm_first_sandwich": True,
    "embeddings_scale": 8.0,
    "attention_sliding_window_length": 6,
    "sliding_window_every_other_decoder_layer": True,
    "attention_logit_softcapping": 5.0,
    "final_logit_softcapping": 3.0,
    "share_embedding_weights": True,
}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "learned positions (gpt3)": ("gpt3", {}),
    "fixed positions (gpt2)": ("gpt2", {"position_embedding_type": "fixed"}),
    "rotary GQA (llama)": ("llama", LLAMA_LAYOUT),
    "sliding window (mistral)": ("mistral", {**LLAMA_LAYOUT, "attention_sliding_window_length": 5}),
    "MoE (mixtral)": ("mixtral", {**LLAMA_LAYOUT, "moe": {"num_experts": 4, "top_k": 2}}),
    "softcaps, sandwich, alternate windows (gemma2)": ("gemma2", GEMMA2),
    "ALiBi (bloom)": ("bloom", {"position_embedding_type": "alibi"}),
    "MQA, learned (starcoder)": (
        "starcoder",
        {
            "attention_module": "multiquery_attention",
            "extra_attention_params": {"num_kv_groups": 1},
        },
    ),
    "parallel block (gptj)": ("gptj", {"rotary_dim": 8}),
    "parallel GQA, untied norms (falcon)": (
        "falcon",
        {
            "rotary_dim": 16,
            "attention_module": "multiquery_attention",
            "extra_attention_params": {"num_kv_groups": 2},
            "use_untied_layer_norm": True,
        },
    ),
    "parallel, window and sinks (gpt-neox)": (
        "gpt-neox",
        {"rotary_dim": 8, "attention_sliding_window_length": 4, "attention_sink_tokens": 2},
    ),
}
ATOL = 1e-5


def _model(family: str, keys: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    return build_decoder(family, {**SHARED, **keys}).eval().model


def _ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, V, (batch, length), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(("family", "keys"), CASES.values(), ids=CASES.keys())
def test_cached_decoding_equals_a_full_recompute_at_every_step(
    family: str, keys: dict[str, Any]
) -> None:
    model = _model(family, keys)
    ids = _ids(2, 20)
    with torch.no_grad():
        full = model(ids)[0]
        cache = model.new_cache(2, 20)
        steps = [model.decode(ids[:, :7], cache)]
        steps += [model.decode(ids[:, i : i + 1], cache) for i in range(7, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("family", "keys"), CASES.values(), ids=CASES.keys())
def test_a_left_padded_row_gets_the_logits_of_the_row_alone(
    family: str, keys: dict[str, Any]
) -> None:
    model = _model(family, keys)
    ids = _ids(2, 16)
    pad = 4
    batch = ids.clone()
    batch[1, pad:] = ids[1, : 16 - pad]
    batch[1, :pad] = 0
    mask = torch.ones_like(batch)
    mask[1, :pad] = 0
    with torch.no_grad():
        alone = model(ids[1:, : 16 - pad])[0]
        cache = model.new_cache(2, 18)
        padded = model.decode(batch, cache, mask)
        following = model.decode(ids[:, :1], cache)
        reference = model(torch.cat([ids[1:, : 16 - pad], ids[1:, :1]], dim=1))[0][:, -1]
    torch.testing.assert_close(padded[1, pad:], alone[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(following[1, -1], reference[0], atol=ATOL, rtol=0)


def test_the_cache_refuses_more_tokens_than_it_holds() -> None:
    model = _model("llama", LLAMA_LAYOUT)
    cache = model.new_cache(1, 4)
    with torch.no_grad(), pytest.raises(ValueError, match="holds 4 tokens; 5 asked for"):
        model.decode(_ids(1, 5), cache)


def test_the_training_forward_is_unchanged_by_a_cache_elsewhere() -> None:
    """Decoding keeps its state in the cache object: the module's forward gives the same."""
    model = _model("mistral", {**LLAMA_LAYOUT, "attention_sliding_window_length": 5})
    ids = _ids(2, 12)
    with torch.no_grad():
        before = model(ids)[0]
        model.decode(ids, model.new_cache(2, 12))
        after = model(ids)[0]
    assert torch.equal(before, after)
