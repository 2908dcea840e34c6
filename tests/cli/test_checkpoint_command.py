"""``plugtrain checkpoint relayout`` and its older spelling ``checkpoint convert SOURCE TARGET``."""

from __future__ import annotations

import pytest
import torch

from plugtrain.cli import main
from plugtrain.train.checkpointing import load_checkpoint, save_checkpoint


def _state() -> dict[str, object]:
    generator = torch.Generator().manual_seed(0)
    return {
        "global_step": 7,
        "model": {
            "linear.weight": torch.randn(4, 3, generator=generator),
            "linear.bias": torch.arange(4, dtype=torch.float64),
        },
        "optimizer": {"state": {}, "param_groups": [{"lr": 0.25, "params": [0, 1]}]},
    }


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_relayout_and_the_old_convert_spelling_round_trip_a_checkpoint(tmp_path, capsys):
    source = save_checkpoint(tmp_path / "checkpoint_7.mdl", _state())
    folder = tmp_path / "dcp" / "checkpoint_7.mdl"
    assert main(["checkpoint", "relayout", str(source), str(folder)]) == 0
    assert folder.is_dir()
    back = tmp_path / "back.mdl"
    assert main(["checkpoint", "convert", str(folder), str(back)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{source} -> ")
    assert out[1].startswith(f"{folder} -> ")
    assert _same(load_checkpoint(back), _state())


def test_relayout_refuses_an_existing_target_and_needs_one(tmp_path, capsys):
    source = save_checkpoint(tmp_path / "a.mdl", _state())
    taken = tmp_path / "b.mdl"
    taken.write_bytes(b"")
    assert main(["checkpoint", "relayout", str(source), str(taken)]) == 1
    assert "exists already" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # argparse: TARGET is required here
        main(["checkpoint", "relayout", str(source)])
    assert exited.value.code == 2
    assert "target" in capsys.readouterr().err
