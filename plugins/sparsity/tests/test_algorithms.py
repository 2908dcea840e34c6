"""Static, GMP, SET, RigL and the init methods against values written out (small tensors)."""

from __future__ import annotations

import pytest
import torch

from plugtrain.protocols import SparsityAlgorithm
from plugtrain_sparsity.gmp import GMP
from plugtrain_sparsity.init import INIT_METHODS, make_init_method
from plugtrain_sparsity.masks import Balance
from plugtrain_sparsity.rigl import RigL
from plugtrain_sparsity.set import SET
from plugtrain_sparsity.static import Static

W = [[0.1, -0.8, 0.3, 0.05], [0.6, -0.2, 0.7, -0.4]]


def _mask(rows):
    return torch.tensor(rows, dtype=torch.bool)


def _generator(seed=0):
    return torch.Generator().manual_seed(seed)


def _param(values=W):
    param = torch.nn.Parameter(torch.tensor(values))
    param.grad = torch.zeros_like(param)  # as after a step (a parameter without one is skipped)
    return param


def _ints(mask):
    return mask.int().tolist()


@pytest.mark.parametrize("cls", [Static, GMP, SET, RigL])
def test_each_meets_the_protocol(cls):
    sparsity = 0.5 if cls is Static else {"type": "linear", "init": 0.0, "slope": 0.1}
    assert isinstance(cls([("w", _param())], sparsity), SparsityAlgorithm)


# -- init methods -------------------------------------------------------------------------------


def test_random_keeps_exactly_k_drawn_from_the_generator():
    mask = INIT_METHODS["random"](torch.zeros(4, 4), 0.75, Balance(), _generator(0))
    assert _ints(mask) == [[0, 1, 0, 0], [0, 1, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]]
    again = INIT_METHODS["random"](torch.zeros(4, 4), 0.75, Balance(), _generator(0))
    assert torch.equal(mask, again)
    # trunc((1 - 0.7) * 10) = 3, although (1 - 0.7) * 10 is 3.0000000000000004
    assert int(INIT_METHODS["random"](torch.zeros(10), 0.7, Balance(), _generator(1)).sum()) == 3


def test_topk_from_zeros_and_checkerboard():
    weight = torch.tensor(W)
    topk = INIT_METHODS["topk"](weight, 0.5, Balance(), _generator())
    assert _ints(topk) == [[0, 1, 0, 0], [1, 0, 1, 1]]
    zeros = INIT_METHODS["from_zeros"](
        torch.tensor([[0.0, 2.0], [-1.0, 0.0]]), 0.9, Balance(), None
    )
    assert _ints(zeros) == [[0, 1], [1, 0]]
    board = INIT_METHODS["checkerboard"]
    assert _ints(board(torch.zeros(4, 4), 0.5, Balance(), None)) == [
        [0, 1, 0, 1],
        [1, 0, 1, 0],
        [0, 1, 0, 1],
        [1, 0, 1, 0],
    ]
    assert _ints(board(torch.zeros(3, 6), 2 / 3, Balance(), None)) == [
        [0, 0, 1, 0, 0, 1],
        [1, 0, 0, 1, 0, 0],
        [0, 1, 0, 0, 1, 0],
    ]
    assert _ints(board(torch.zeros(8), 0.75, Balance(), None)) == [0, 0, 0, 1, 0, 0, 0, 1]


def test_topk_per_balance_group():
    weight = torch.tensor(W)
    rows = INIT_METHODS["topk"](weight, 0.5, Balance(2), None)
    assert _ints(rows) == [[0, 1, 1, 0], [1, 0, 1, 0]]
    columns = INIT_METHODS["topk"](weight, 0.5, Balance(2, transpose=True), None)
    # [in, out] = 4 x 2 split into 2 groups of 2 input columns: columns 0-1, columns 2-3
    # columns 0-1 keep 0.8 and 0.6, columns 2-3 keep 0.7 and 0.4
    assert _ints(columns) == [[0, 1, 0, 0], [1, 0, 1, 1]]


def test_a_callable_init_method_and_an_unknown_one():
    def first_row(param, sparsity, score_shaper=None, device=None):
        mask = torch.zeros_like(param, dtype=torch.bool)
        mask[0] = True
        return mask

    mask = make_init_method(first_row)(torch.zeros(2, 3), 0.5, Balance(), None)
    assert _ints(mask) == [[1, 1, 1], [0, 0, 0]]
    with pytest.raises(ValueError, match=r"^Unknown `init_method`") as info:
        make_init_method("Random")
    assert str(info.value).startswith(
        'Unknown `init_method`: "Random". Valid options are one of the built-in '
        "['random', 'topk', 'from_zeros', 'checkerboard'] or a function with signature "
    )


# -- Static -------------------------------------------------------------------------------------


def test_static_levels_and_errors():
    static = Static([("w", _param())], 0.5, init_method="topk")
    assert _ints(static.initial_masks(_generator())["w"]) == [[0, 1, 0, 0], [1, 0, 1, 1]]
    assert static.advance(True) is False
    assert static.state_dict() == {}
    assert Static([("w", _param())], 0).sparsity == 0.0  # an int is taken, as Model Zoo does
    with pytest.raises(ValueError, match=r"^Static sparsity algorithm only supports constant "):
        Static([("w", _param())], [0.5, 0.6])
    with pytest.raises(ValueError, match=r"^Invalid sparsity level 1.0. Must be 0.0 <= s < 1.0$"):
        Static([("w", _param())], 1.0)


# -- GMP ----------------------------------------------------------------------------------------


def test_gmp_prunes_by_magnitude_to_the_scheduled_level():
    param = _param()
    gmp = GMP([("w", param)], {"type": "linear", "init": 0.0, "slope": 0.25}, init_method="topk")
    masks = gmp.initial_masks(_generator())
    assert _ints(masks["w"]) == [[1, 1, 1, 1], [1, 1, 1, 1]]  # level 0 at step 0
    expected = {
        1: [[0, 1, 1, 0], [1, 1, 1, 1]],  # 0.25: the two smallest |w| (0.1, 0.05) go
        2: [[0, 1, 0, 0], [1, 0, 1, 1]],  # 0.5
        3: [[0, 1, 0, 0], [0, 0, 1, 0]],  # 0.75
    }
    for step, rows in expected.items():
        assert gmp.advance(True)
        masks = gmp.update_masks(masks, None, _generator())
        assert _ints(masks["w"]) == rows, step
        with torch.no_grad():
            param.masked_fill_(~masks["w"], 0)  # what the core does
        assert gmp.target_sparsity() == 0.25 * step
    assert gmp.state_dict() == {"step": torch.tensor(3), "sparsity": {}}


def test_gmp_refuses_a_constant():
    with pytest.raises(ValueError, match=r"^Configured with constant") as info:
        GMP([("w", _param())], 0.5)
    assert str(info.value) == (
        "Configured with constant sparsity 0.5. This is not valid, because the sparsity pattern "
        'would not change during training. For a static sparsity pattern, use `algorithm="static".`'
    )


def test_update_schedule_and_starting_dense():
    gmp = GMP(
        [("w", _param())],
        {"type": "linear", "init": 0.5, "slope": 0.0},
        update={"freq": 2, "start": 1, "stop": 6},
        init_method="topk",
    )
    # step 0 is no update step (start 1): dense until the first update
    assert _ints(gmp.initial_masks(_generator())["w"]) == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert [gmp.advance(True) for _ in range(7)] == [True, False, True, False, True, False, False]
    steps = GMP([("w", _param())], [0.5], update={"steps": [0, 3]})
    assert _ints(steps.initial_masks(_generator())["w"]) != [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert [steps.advance(True) for _ in range(4)] == [False, False, True, False]
    # a step the optimizer did not apply is counted but never updates
    skipped = GMP([("w", _param())], [0.5])
    assert skipped.advance(False) is False
    assert skipped.step == 1


def test_a_cycling_level_moves_once_at_init_and_on_each_update_and_is_saved():
    gmp = GMP([("a", _param()), ("b", _param())], [0.25, 0.5, 0.75], init_method="topk")
    masks = gmp.initial_masks(_generator())
    assert int(masks["a"].sum()) == 6  # values[0]
    levels = []
    for _ in range(4):
        assert gmp.advance(True)
        masks = gmp.update_masks(masks, None, _generator())
        levels.append(int(masks["a"].sum()))
    assert levels == [4, 2, 6, 4]  # values[1], [2], [0], [1]
    state = gmp.state_dict()
    assert state == {"step": torch.tensor(4), "sparsity": {"a": {"index": 2}}}
    fresh = GMP([("a", _param()), ("b", _param())], [0.25, 0.5, 0.75])
    fresh.load_state_dict(state)
    assert fresh.step == 4
    assert fresh.sparsity.index == 2  # cstorch loses this (a fixed bug)


# -- SET and RigL ---------------------------------------------------------------------------------


def test_set_drops_the_smallest_and_regrows_at_random():
    param = _param()
    algorithm = SET([("w", param)], 0.5, drop_fraction=0.5)
    mask = _mask([[1, 1, 1, 0], [1, 0, 1, 0]])  # 5 kept: 0.1, 0.8, 0.3, 0.6, 0.7
    assert algorithm.advance(True)
    new = algorithm.update_masks({"w": mask}, None, _generator(0))["w"]
    # keep trunc(0.5 * 5) = 2 largest (0.8, 0.7), then grow 4 - 2 = 2 drawn from the generator
    assert _ints(new) == [[0, 1, 0, 0], [0, 1, 1, 1]]
    again = SET([("w", param)], 0.5, drop_fraction=0.5)
    again.advance(True)
    assert torch.equal(again.update_masks({"w": mask}, None, _generator(0))["w"], new)


def test_rigl_regrows_where_the_dense_gradient_is_largest():
    param = _param()
    rigl = RigL([("w", param)], 0.5, drop_fraction=0.5)
    mask = _mask([[0, 1, 1, 1], [0, 0, 1, 0]])  # kept: 0.8, 0.3, 0.05, 0.7
    gradient = torch.tensor([[0.9, -5.0, 0.0, 0.0], [-0.1, 2.0, 0.0, 0.3]])
    assert rigl.advance(True)
    new = rigl.update_masks({"w": mask}, {"w": gradient}, _generator())["w"]
    # keep trunc(0.5 * 4) = 2 (0.8, 0.7); grow 2 where |grad| is largest among the rest:
    # (1, 1) with 2.0 and (0, 0) with 0.9 ((0, 1) with 5.0 is kept already)
    assert _ints(new) == [[1, 1, 0, 0], [0, 1, 1, 0]]


def test_rigl_balanced_keeps_each_group_at_the_level():
    param = _param()
    rigl = RigL([("w", param)], 0.5, drop_fraction=0.5, balance_out_groups=2, init_method="topk")
    mask = rigl.initial_masks(_generator())["w"]
    assert _ints(mask) == [[0, 1, 1, 0], [1, 0, 1, 0]]  # two per row
    gradient = torch.tensor([[0.0, 0.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.1]])
    rigl.advance(True)
    new = rigl.update_masks({"w": mask}, {"w": gradient}, _generator())["w"]
    # per row keep trunc(0.5 * 2) = 1 and grow 1: row 0 keeps 0.8, grows (0, 3); row 1 keeps
    # 0.7 and grows (1, 3)
    assert _ints(new) == [[0, 1, 0, 1], [0, 0, 1, 1]]


def test_rigl_errors():
    with pytest.raises(ValueError, match=r"^Only one of") as info:
        RigL([("w", _param())], 0.5, balance_in_groups=2, balance_out_groups=2)
    assert str(info.value) == (
        "Only one of `balance_in_groups` and `balance_out_groups` can be specified at a time."
    )
    with pytest.raises(ValueError, match=r"^Sparsity group configured") as info:
        RigL([("a", _param()), ("fc.weight", torch.zeros(3, 5))], 0.5, balance_out_groups=2)
    assert str(info.value) == (
        "Sparsity group configured with `balance_out_groups`=2 but parameter fc.weight does not "
        "have a dimension with a multiple of 2: torch.Size([3, 5])"
    )


def test_cosine_drop_fraction_as_in_the_gpt3_configs():
    rigl = RigL(
        [("w", _param())],
        0.75,
        drop_fraction={"type": "cosine", "init": 0.3, "half_period": 3584},
        update={"freq": 100, "stop": 3584},
    )
    assert rigl.drop_fraction(0) == pytest.approx(0.3)
    assert rigl.drop_fraction(1792) == pytest.approx(0.15)
    assert rigl.drop_fraction(3584) == pytest.approx(0.0, abs=1e-12)
    updates = [step for step in range(1, 4000) if rigl.advance(True)]
    assert updates[:2] == [100, 200]
    assert updates[-1] == 3500
    assert len(updates) == 35


def test_a_parameter_without_a_gradient_keeps_its_mask():
    used, unused = _param(), _param()
    unused.grad = None
    gmp = GMP([("used", used), ("unused", unused)], [0.5], init_method="topk")
    gmp.advance(True)
    ones = torch.ones(2, 4, dtype=torch.bool)
    new = gmp.update_masks({"used": ones, "unused": ones}, None, _generator())
    assert list(new) == ["used"]
