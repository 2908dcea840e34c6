"""``examples/modelzoo_dpo.yaml`` checks and trains on the data ``plugtrain_models.dpo.samples``
writes, as its header says, from a working directory of its own."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from plugtrain.cli import main
from plugtrain_models.dpo.samples import write_dpo_samples

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "modelzoo_dpo.yaml"


@pytest.mark.slow  # 30 training steps
def test_the_dpo_example_checks_and_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    write_dpo_samples("runs/data/dpo")
    assert main(["check", str(EXAMPLE)]) == 0
    assert main(["fit", str(EXAMPLE)]) == 0
    steps = yaml.safe_load(EXAMPLE.read_text())["trainer"]["init"]["loop"]["max_steps"]
    saved = torch.load(tmp_path / "runs" / "modelzoo_dpo" / f"checkpoint_{steps}.mdl",
                       weights_only=True)  # fmt: skip
    assert any(name.startswith("ref_model.") for name in saved["model"])
    logged = [line for line in capsys.readouterr().err.splitlines() if f"/{steps} loss" in line]
    losses = [float(line.split(" loss ")[1].split()[0]) for line in logged]
    assert losses
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < math.log(2)  # below the loss of policy == reference: it learnt
