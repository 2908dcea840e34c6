"""Parameter tagging (SPEC section 4) and the optimizer set-up that applies it."""

from __future__ import annotations

import subprocess
import sys

import pytest

import plugtrain
from plugtrain.bases.param_groups import (
    build_param_groups,
    configure_param_groups,
    name_matches,
)

torch = pytest.importorskip("torch")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 3)
        self.fc2 = torch.nn.Linear(3, 2)


def _summary(groups):
    return [(g.get("tags"), g["param_names"]) for g in groups]


SEED_FILTERS = {
    "params": [{"params": "*bias", "tag": "bias_params"}, {"params": "fc1*", "tag": "fc1_params"}]
}


def test_seed_example_gives_the_seed_groups_and_tags():
    groups = plugtrain.partition_params_group_with_tags(Net(), SEED_FILTERS)
    seed = [
        ({"bias_params"}, ["fc2.bias"]),
        ({"fc1_params"}, ["fc1.weight"]),
        ({"bias_params", "fc1_params"}, ["fc1.bias"]),
        (None, ["fc2.weight"]),
    ]
    summary = _summary(groups)
    assert sorted(summary, key=str) == sorted(seed, key=str)
    # Groups come in order of first appearance in named_parameters() (SPEC section 4).
    assert [names for _, names in summary] == [
        ["fc1.weight"],
        ["fc1.bias"],
        ["fc2.weight"],
        ["fc2.bias"],
    ]
    untagged = next(g for g in groups if g["param_names"] == ["fc2.weight"])
    assert "tags" not in untagged
    model = Net()
    params = plugtrain.partition_params_group_with_tags(model.named_parameters(), SEED_FILTERS)
    assert params[0]["params"][0] is model.fc1.weight


def test_groups_are_usable_by_an_optimizer():
    groups = plugtrain.partition_params_group_with_tags(Net(), SEED_FILTERS)
    opt = plugtrain.optim.SGD(groups, lr=0.1, momentum=0.9)
    assert [g.get("tags") for g in opt.param_groups] == [g.get("tags") for g in groups]


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("fc1.weight", "model.fc1.weight", True),
        ("fc1.weight", "fc1.weight", True),
        ("*bias", "model.layers.0.bias", True),
        ("layers.*.bias", "model.layers.0.bias", True),
        ("fc1*", "model.fc1.weight", True),
        ("c1.weight", "model.fc1.weight", False),
        ("FC1*", "fc1.weight", False),
        ("weight", "fc1.weight", True),
        ("fc1", "fc1.weight", False),
    ],
)
def test_globs_match_the_whole_name_or_a_dot_suffix(pattern, name, expected):
    assert name_matches(pattern, name) is expected


def test_a_single_filter_mapping_and_a_list_of_globs_are_accepted():
    one = plugtrain.partition_params_group_with_tags(Net(), {"params": "*bias", "tag": "b"})
    assert _summary(one)[1] == ({"b"}, ["fc1.bias", "fc2.bias"])
    many = plugtrain.partition_params_group_with_tags(
        Net(), [{"params": ["fc1.weight", "fc2.weight"], "tag": "w"}]
    )
    assert _summary(many)[0] == ({"w"}, ["fc1.weight", "fc2.weight"])


def test_frozen_parameters_are_left_out():
    model = Net()
    model.fc2.weight.requires_grad_(False)
    groups = plugtrain.partition_params_group_with_tags(model, {"params": "*bias", "tag": "b"})
    assert "fc2.weight" not in [n for g in groups for n in g["param_names"]]


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"params": "nothing*", "tag": "x"}, "matches no trainable parameter"),
        ({"params": "*bias"}, "needs a string 'tag'"),
        ({"params": "*bias", "tag": "x", "lr": 0.1}, r"unknown filter key\(s\) \['lr'\]"),
        ([{"params": 3, "tag": "x"}], "must be a glob or a list of globs"),
    ],
)
def test_bad_filters_are_errors(filters, message):
    with pytest.raises(ValueError, match=message):
        plugtrain.partition_params_group_with_tags(Net(), filters)


def test_bare_tensors_get_a_clear_error():
    with pytest.raises(ValueError, match=r"not model.parameters\(\)"):
        plugtrain.partition_params_group_with_tags(Net().parameters(), SEED_FILTERS)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.scale = torch.nn.Parameter(torch.ones(4))


def test_bias_and_norm_parameters_move_to_weight_decay_zero_groups_keeping_tags():
    model = Block()
    groups = build_param_groups(model, [{"params": "proj.*", "tag": "p"}])
    summary = [(g.get("tags"), g.get("weight_decay"), g["param_names"]) for g in groups]
    # named_parameters() lists a module's own parameters before its children's.
    assert summary == [
        (None, None, ["scale"]),
        (None, 0.0, ["norm.weight", "norm.bias"]),
        ({"p"}, None, ["proj.weight"]),
        ({"p"}, 0.0, ["proj.bias"]),
    ]


def test_weight_decay_exclusion_can_be_switched_off():
    groups = build_param_groups(Block(), None, exclude_from_weight_decay=False)
    assert len(groups) == 1
    assert "weight_decay" not in groups[0]
    same = configure_param_groups(groups, exclude_from_weight_decay=False)
    assert same == groups
    assert same[0] is not groups[0]


def test_norm_layers_are_recognised_by_name_without_the_model():
    groups = plugtrain.partition_params_group_with_tags(
        [
            ("ln_f.weight", torch.nn.Parameter(torch.ones(3))),
            ("head.weight", torch.nn.Parameter(torch.ones(2, 3))),
        ],
        [],
    )
    split = configure_param_groups(groups)
    assert [(g["param_names"], g.get("weight_decay")) for g in split] == [
        (["head.weight"], None),
        (["ln_f.weight"], 0.0),
    ]


def test_an_optimizer_built_from_the_groups_keeps_tags_and_zero_decay():
    groups = build_param_groups(Net(), {"params": "fc1*", "tag": "fc1"})
    opt = plugtrain.optim.AdamW(groups, lr=0.01, weight_decay=0.1)
    assert [(g.get("tags"), g["weight_decay"]) for g in opt.param_groups] == [
        ({"fc1"}, 0.1),
        ({"fc1"}, 0.0),
        (None, 0.1),
        (None, 0.0),
    ]


def test_tagging_does_not_import_torch():
    script = "import plugtrain.bases.param_groups, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
