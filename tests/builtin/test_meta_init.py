"""Meta-device construction: ``init_weights()`` after ``to_empty`` gives a whole build's values.

The decoder families are checked in one process (plain tensors); :class:`ShardFiller` on DTensor
parameters in a one-process mesh (the two-process runs are in
tests/train/distributed/test_sharded.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from plugtrain.errors import BackendError
from plugtrain_backends import _fsdp
from plugtrain_backends._meta_init import built_on_meta, can_build_on_meta, materialise
from plugtrain_models.families import FAMILIES, build_decoder
from plugtrain_models.schemas import GPTJ_FAMILIES

TINY = {
    "vocab_size": 33,
    "hidden_size": 16,
    "num_heads": 2,
    "num_hidden_layers": 2,
    "filter_size": 24,
    "max_position_embeddings": 16,
}
VARIANTS = {
    "default": {},
    "alibi": {"position_embedding_type": "alibi"},
    "fixed": {"position_embedding_type": "fixed"},
    "rotary": {"position_embedding_type": "rotary", "rotary_dim": 8},
    "untied": {"share_embedding_weights": False},
    "moe": {"moe": {"num_experts": 3, "top_k": 2}},
}


def _cases() -> Iterator[tuple[str, str]]:
    for family in FAMILIES:
        for variant in VARIANTS:
            if family in GPTJ_FAMILIES and variant == "alibi":
                continue  # the GPT-J path has no ALiBi
            yield family, variant


@pytest.mark.parametrize(("family", "variant"), list(_cases()))
def test_a_meta_build_filled_by_init_weights_equals_a_whole_build(family, variant) -> None:
    keys = {**TINY, **VARIANTS[variant]}
    torch.manual_seed(3)
    whole = build_decoder(family, keys)
    after_whole = torch.get_rng_state()
    torch.manual_seed(3)
    with torch.device("meta"):
        empty = build_decoder(family, keys)
    assert built_on_meta(empty)
    assert can_build_on_meta(empty)
    materialise(empty, torch.device("cpu"))
    assert not built_on_meta(empty)
    assert torch.equal(torch.get_rng_state(), after_whole)  # the same draws, no more
    expected, filled = whole.state_dict(), empty.state_dict()
    assert expected.keys() == filled.keys()
    assert [k for k in expected if not torch.equal(expected[k], filled[k])] == []
    buffers = dict(empty.named_buffers())
    assert all(torch.equal(b, buffers[n]) for n, b in whole.named_buffers())
    tied = whole.model.lm_head.weight is whole.model.embedding_layer.word_embeddings.weight
    assert tied == (variant != "untied")
    head, table = empty.model.lm_head, empty.model.embedding_layer.word_embeddings
    assert (head.weight is table.weight) == tied


class TwoPasses(nn.Module):
    """Its own fill after the layers' defaults, then a scaling that reads two filled weights."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.proj = nn.Linear(4, 5)
        self.head = nn.Linear(4, 7, bias=False)
        self.head.weight = self.embed.weight
        self._fill()

    @torch.no_grad()
    def init_weights(self) -> None:
        """The layers' default draws in construction order, then the same fill."""
        for layer in (self.embed, self.proj, self.head):
            layer.reset_parameters()
        self._fill()

    @torch.no_grad()
    def _fill(self) -> None:
        nn.init.trunc_normal_(self.embed.weight, std=0.5)
        nn.init.kaiming_uniform_(self.proj.weight)
        self.proj.bias.uniform_(-1, 1)
        self.embed.weight.mul_(self.proj.weight.abs().mean())


def test_shards_are_filled_and_a_parameter_read_again_is_gathered(one_process_group) -> None:
    torch.manual_seed(5)
    whole = TwoPasses()
    torch.manual_seed(5)
    with torch.device("meta"):
        model = TwoPasses()
    plan = _fsdp.FSDPPlan("fsdp2", None, 1, True, ())
    _fsdp.shard_model(model, _fsdp.build_mesh("cpu", (1,)), plan, None)
    filler = materialise(model, torch.device("cpu"))
    assert filler.gathered == 2  # the scaling reads proj.weight and embed.weight again
    assert model.head.weight is model.embed.weight
    assert type(model.embed.weight).__name__ == "DTensor"
    state = {k: v.full_tensor() for k, v in model.state_dict().items()}
    assert all(torch.equal(v, state[k]) for k, v in whole.state_dict().items())


def test_a_model_without_init_weights_cannot_be_filled() -> None:
    with torch.device("meta"):
        model = nn.Linear(3, 3)
    assert not can_build_on_meta(model)
    with pytest.raises(BackendError, match="Linear has no init_weights"):
        materialise(model, torch.device("cpu"))
