"""FSDP2 and DCP checkpoints for real: two gloo processes (one torchrun launch), then one.

The runs are in ``tests/sharded_worker.py``: a 34k-parameter GPT decoder, 20 steps of 2
micro-batches, AdamW, clipping at norm 1, with DDP and with FSDP2 (sync and async DCP
checkpoints, single-file checkpoints), resumed from step 10 at 2 processes and at 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.errors import CorruptCheckpointError

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "sharded_worker.py"


def _python(out: Path, *command: str) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        env=environ,
        cwd=out,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every run's record, in one launch of 2 processes and one of 1."""
    out = tmp_path_factory.mktemp("sharded")
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    _python(out, *torchrun, str(WORKER), str(out))
    _python(out, str(WORKER), str(out), "--alone")
    return out


def _record(out: Path, name: str, rank: int = 0) -> dict[str, Any]:
    return json.loads((out / f"{name}.rank{rank}.json").read_text())


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))


def test_fsdp2_trains_like_ddp_on_half_the_memory(runs: Path) -> None:
    ddp, fsdp = _record(runs, "ddp"), _record(runs, "fsdp2_dcp")
    assert ddp["param_type"] == "Parameter"
    assert fsdp["param_type"] == "DTensor"
    assert len(fsdp["losses"]) == 20
    assert _relative(ddp["losses"], fsdp["losses"]) <= 1e-5
    norms = zip(ddp["grad_norms"], fsdp["grad_norms"], strict=True)
    assert max(abs(a - b) for a, b in norms) <= 2e-4
    for rank in (0, 1):
        local = sum(_record(runs, "fsdp2_dcp", rank)["bytes"].values())
        replica = sum(_record(runs, "ddp", rank)["bytes"].values())
        assert local <= 0.55 * replica, (rank, local, replica)
    # the same updates whatever the checkpoint format (single files gather the shards)
    assert _record(runs, "fsdp2_file")["losses"] == fsdp["losses"]
    assert _record(runs, "fsdp2_async")["losses"] == fsdp["losses"]


def test_dcp_and_file_checkpoints_resume_bit_exactly_at_2_processes(runs: Path) -> None:
    whole = _record(runs, "fsdp2_dcp")
    for name in ("dcp_resume", "file_resume"):
        resumed = _record(runs, name)
        assert resumed["losses"] == whole["losses"][10:], name
        assert resumed["ln_f"] == whole["ln_f"], name
    # a single-file checkpoint of FSDP2 holds full tensors: DDP resumes from it
    ddp = _record(runs, "ddp_from_fsdp2_file")
    assert _relative(ddp["losses"], whole["losses"][10:]) <= 1e-5


def test_a_dcp_checkpoint_of_2_processes_resumes_in_1(runs: Path) -> None:
    equal = json.loads((runs / "alone_equal.json").read_text())
    assert equal == {"model": True, "optimizer": True, "step": 10}  # == dcp_to_torch_save's
    alone, two = _record(runs, "alone_dcp_resume"), _record(runs, "dcp_resume")
    assert alone["param_type"] == "Parameter"
    assert _relative(alone["losses"], two["losses"]) <= 1e-5


def test_dcp_folders_hold_a_shard_per_process_and_async_writes_the_same(runs: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder = runs / "runs" / "fsdp2_dcp"
    names = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".plugtrain"))
    assert names == ["checkpoint_10.mdl", "checkpoint_20.mdl"]  # no .partial left
    files = sorted(p.name for p in (folder / "checkpoint_10.mdl").iterdir())
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp", "trainer.pt"]
    for step in (10, 20):
        sync, background = (runs / f"{step}.{kind}.pt" for kind in ("sync", "async"))
        dcp_to_torch_save(folder / f"checkpoint_{step}.mdl", sync)
        dcp_to_torch_save(runs / "runs" / "fsdp2_async" / f"checkpoint_{step}.mdl", background)
        a, b = (torch.load(p, weights_only=True) for p in (sync, background))
        assert a["model"].keys() == b["model"].keys()
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_a_damaged_dcp_checkpoint_is_skipped_for_the_previous_one(runs: Path, tmp_path) -> None:
    from plugtrain.train.dcp_checkpointer import DCPCheckpointer, verify_folder

    for step in (10, 20):
        source = runs / "runs" / "fsdp2_dcp" / f"checkpoint_{step}.mdl"
        shutil.copytree(source, tmp_path / source.name)
    newest = tmp_path / "checkpoint_20.mdl"
    with (newest / "__1_0.distcp").open("r+b") as shard:
        shard.truncate(1000)
    with pytest.raises(CorruptCheckpointError, match=r"__1_0\.distcp is 1000 bytes"):
        verify_folder(newest)
    (tmp_path / ".checkpoint_30.mdl.partial").mkdir()  # an interrupted save
    checkpointer = DCPCheckpointer(tmp_path, "checkpoint_{step}.mdl", lambda _: {})
    assert [step for step, _ in checkpointer.list_checkpoints()] == [20, 10]
    tried: list[str] = []

    def restore(path: Path) -> None:
        tried.append(path.name)
        verify_folder(path)

    assert checkpointer.load_newest(restore) == tmp_path / "checkpoint_10.mdl"
    assert tried == ["checkpoint_20.mdl", "checkpoint_10.mdl"]
    assert [p.name for p in checkpointer.clean_up()] == [".checkpoint_30.mdl.partial"]
    assert checkpointer.prune(1) == [tmp_path / "checkpoint_10.mdl"]
    assert not (tmp_path / "checkpoint_10.mdl").exists()


def test_each_built_in_optimizer_matches_its_whole_run_or_is_refused_by_check(runs: Path) -> None:
    from plugtrain.config.sharding import supports_sharded_params
    from plugtrain.plugins import get_registry

    results = json.loads((runs / "optimizers.json").read_text())
    assert len(results) == 15
    registry = get_registry()
    for name, outcome in results.items():
        if supports_sharded_params(registry, "optimizer", name):
            assert isinstance(outcome, float), (name, outcome)
            assert outcome <= 1e-6, name
        else:
            assert "cannot step sharded (DTensor) parameters" in outcome, name
    refused = sorted(n for n in results if not supports_sharded_params(registry, "optimizer", n))
    assert refused == ["Adafactor", "Lamb", "Muon"]


BAD_PLAN = """\
trainer:
  init:
    backend:
      backend_type: CPU
      num_processes: 2
      data_parallel: fsdp2
      dp_shard: 3
    model:
      MLP: {in_features: 4, hidden: 8, out_features: 2}
    optimizer:
      Lamb: {lr: 0.1}
    sparsity: 0.5
    callbacks:
    - ComputeNorm: {}
    loop: {max_steps: 2}
  fit:
    train_dataloader:
      Synthetic: {batch_size: 4}
"""


def test_check_refuses_what_fsdp2_cannot_run_at_its_line(tmp_path: Path) -> None:
    from plugtrain.cli import main

    run = tmp_path / "run.yaml"
    run.write_text(BAD_PLAN)
    done = subprocess.run(
        [sys.executable, "-m", "plugtrain", "check", str(run)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert f"{run}:7:7: trainer.init.backend.dp_shard: dp_shard x dp_replicate must equal" in (
        done.stderr
    )
    lamb = next(line for line in lines if ":11:7:" in line)
    assert "Lamb cannot run on sharded parameters" in lamb
    assert "AdamW" in lamb
    assert "Lamb," not in lamb
    assert f"{run}:12:5: trainer.init.sparsity: sparsity cannot run" in done.stderr
    assert "ComputeNorm" not in done.stderr  # a callback that runs on shards
    # the same file with ddp and a whole-tensor optimizer is fine
    run.write_text(BAD_PLAN.replace("fsdp2", "ddp").replace("      dp_shard: 3\n", ""))
    assert main(["check", str(run)]) == 0
