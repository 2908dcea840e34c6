"""Generation on plugtrain's decoder: Model Zoo's sampling rules, stops, batches, seeds.

The model is a tiny Llama-shaped decoder with its own seeded random weights; the oracle for
greedy ids against transformers is ``test_generation_hf.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from plugtrain_models.families import build_decoder
from plugtrain_models.generation import Sampling, generate
from plugtrain_models.generation.sampling import DEFAULT_TOP_K

KEYS = {
    "vocab_size": 160,
    "hidden_size": 64,
    "num_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 40,
    "filter_size": 96,
    "position_embedding_type": "rotary",
    "rotary_dim": 16,
    "norm_type": "rmsnorm",
    "nonlinearity": "swiglu",
}
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    built = build_decoder("llama", KEYS).eval()
    with torch.no_grad():  # sharper logits than the default initialisation: fewer near-ties
        for parameter in built.parameters():
            if parameter.ndim == 2:
                parameter.mul_(8.0)
    return built


def _greedy_by_recompute(model: torch.nn.Module, prompt: list[int], count: int) -> list[int]:
    """Greedy ids from a full forward per step (no cache): the reference for the cache."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(count):
            ids.append(int(model.logits(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


def test_greedy_with_the_cache_equals_greedy_by_full_recompute(model: torch.nn.Module) -> None:
    generated = generate(model, [PROMPTS[0]], 12)
    assert generated == [_greedy_by_recompute(model, PROMPTS[0], 12)]


def test_a_batch_of_prompts_of_different_lengths_equals_each_prompt_alone(
    model: torch.nn.Module,
) -> None:
    batched = generate(model, PROMPTS, 10)
    alone = [generate(model, [prompt], 10)[0] for prompt in PROMPTS]
    assert batched == alone
    assert len({tuple(ids) for ids in batched}) == 3  # the rows differ: the test can fail


def test_sampling_is_reproducible_under_a_seed_and_varies_with_it(model: torch.nn.Module) -> None:
    sampling = Sampling(temperature=1.5)
    first = generate(model, PROMPTS, 12, sampling=sampling, seed=7)
    assert generate(model, PROMPTS, 12, sampling=sampling, seed=7) == first
    assert generate(model, PROMPTS, 12, sampling=sampling, seed=8) != first


def test_greedy_unless_a_sampling_key_is_set() -> None:
    assert Sampling().greedy
    for keys in ({"temperature": 0.7}, {"top_k": 5}, {"top_p": 0.9}):
        assert not Sampling(**keys).greedy


def test_top_k_1_and_top_p_0_pick_the_argmax() -> None:
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(1)
    for sampling in (Sampling(top_k=1), Sampling(top_p=0.0), Sampling(temperature=1.0, top_k=1)):
        assert torch.equal(sampling.pick(logits, generator), logits.argmax(-1))


def _frequencies(sampling: Sampling, logits: torch.Tensor, draws: int) -> torch.Tensor:
    rows = logits.expand(draws, -1)
    chosen = sampling.pick(rows, torch.Generator().manual_seed(2))
    return torch.bincount(chosen, minlength=logits.shape[-1]).float() / draws


def test_sampling_follows_model_zoos_top_k_then_top_p_distribution() -> None:
    logits = torch.randn(1, 300, generator=torch.Generator().manual_seed(4)) * 2
    draws = 40_000
    probabilities = torch.softmax(logits[0] / 0.8, -1)
    top, index = probabilities.topk(DEFAULT_TOP_K)  # top_k unset while sampling: 100
    mass = top.cumsum(0)
    kept = (mass - top) < 0.6 * mass[-1]  # top_p 0.6 of the top-k mass, the first always kept
    expected = torch.zeros(300)
    expected[index[kept]] = top[kept] / top[kept].sum()
    observed = _frequencies(Sampling(temperature=0.8, top_p=0.6), logits, draws)
    assert observed[expected == 0].sum() == 0  # nothing outside the nucleus
    # each frequency within 5 binomial standard deviations of its probability
    bound = 5 * torch.sqrt(expected * (1 - expected) / draws) + 1e-9
    assert ((observed - expected).abs() <= bound).all()
    assert int(kept.sum()) > 3  # several tokens compete: the check means something


def test_sampling_without_top_k_never_leaves_model_zoos_top_100() -> None:
    logits = torch.zeros(1, 400)
    logits[0, :150] = torch.linspace(3.0, 2.0, 150)  # 150 likely ids, 100 of them allowed
    observed = _frequencies(Sampling(temperature=1.0), logits, 20_000)
    assert observed[100:].sum() == 0
    assert (observed[:100] > 0).sum() > 90


def test_eos_and_stop_sequences_end_a_row_and_are_kept(model: torch.nn.Module) -> None:
    free = generate(model, [PROMPTS[0]], 12)[0]
    eos = free[4]
    ended = generate(model, [PROMPTS[0]], 12, eos_ids=[eos])[0]
    assert ended == free[: free.index(eos) + 1]
    stop = free[5:7]
    stopped = generate(model, [PROMPTS[0]], 12, stop_sequences=[stop])[0]
    assert stopped[-2:] == stop
    assert len(stopped) <= 7


def test_a_finished_row_does_not_change_the_others(model: torch.nn.Module) -> None:
    free = generate(model, PROMPTS, 8)
    eos = free[1][0]  # the second prompt ends at once
    ended = generate(model, PROMPTS, 8, eos_ids=[eos])
    assert ended[1] == [eos]
    for row in (0, 2):
        cut = free[row].index(eos) + 1 if eos in free[row] else len(free[row])
        assert ended[row] == free[row][:cut]


def test_generation_longer_than_the_positions_is_refused(model: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match=r"6 tokens plus 35 new ones .* \(40\)"):
        generate(model, [PROMPTS[0]], 35)


def test_bad_sampling_values_are_refused() -> None:
    with pytest.raises(ValueError, match="temperature must be > 0"):
        Sampling(temperature=0.0)
    with pytest.raises(ValueError, match=r"top_p must be in \[0, 1\]"):
        Sampling(top_p=1.5)
    assert math.isclose(Sampling(top_p=1.0).top_p or 0.0, 1.0)
