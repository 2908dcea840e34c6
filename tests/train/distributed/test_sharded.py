"""FSDP2 and DCP checkpoints for real: gloo processes in torchrun launches of 4 and 2, then 1.

The runs are in ``tests/support/sharded_worker.py``: a 34k-parameter GPT decoder, 20 steps of 16
samples, AdamW, clipping at norm 1, with DDP, with FSDP2 (DCP and single-file checkpoints) and
HSDP (2 x 1 on 2 processes, 2 x 2 on 4), resumed from step 10 at 2 processes (saving
asynchronously, and from the 2 x 2 checkpoint) and at 1 (in this process, which has no process
group: what a fresh interpreter would be, without starting one).
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
from support.paths import REPO, TESTS
from support.plugtrain_cli import run_plugtrain

import plugtrain
from plugtrain.errors import CorruptCheckpointError

pytestmark = pytest.mark.slow  # three real launches (4 processes, 2, then 1)

ROOT = REPO
WORKER = TESTS / "support" / "sharded_worker.py"


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
    """Every run's record: a launch of 4 processes, one of 2, then one process (this one)."""
    import torch.distributed as dist
    from support import sharded_worker

    from plugtrain.bases.backend import release_backend_type

    out = tmp_path_factory.mktemp("sharded")
    torchrun = ["-m", "torch.distributed.run", "--standalone"]
    _python(out, *torchrun, "--nproc-per-node=4", str(WORKER), str(out), "--four")
    _python(out, *torchrun, "--nproc-per-node=2", str(WORKER), str(out))
    assert not dist.is_initialized()  # one process as a fresh one: no group to join
    release_backend_type()  # nor a backend type set by an earlier test
    try:
        sharded_worker.alone(out)
    finally:
        release_backend_type()
    assert not dist.is_initialized()
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
    hsdp = _record(runs, "hsdp")  # 2 replicas x 1 shard: a 2-D mesh
    assert hsdp["param_type"] == "DTensor"
    assert _relative(ddp["losses"], hsdp["losses"]) <= 1e-5


def test_hsdp_2x2_shards_in_each_replica_and_its_checkpoint_resumes_at_2(runs: Path) -> None:
    ddp = _record(runs, "ddp")  # 2 processes, 2 micro-batches each: the same 16 samples a step
    for rank in range(4):
        hsdp = _record(runs, "hsdp_2x2", rank)
        assert hsdp["param_type"] == "DTensor"
        assert _relative(ddp["losses"], hsdp["losses"]) <= 1e-5
        local = sum(hsdp["bytes"].values())
        assert local <= 0.55 * sum(ddp["bytes"].values()), (rank, local)  # 2 shards a replica
    files = sorted(p.name for p in (runs / "runs" / "hsdp_2x2" / "checkpoint_10.mdl").iterdir())
    assert [f for f in files if f.endswith(".distcp")] == [f"__{r}_0.distcp" for r in range(4)]
    resumed = _record(runs, "hsdp_2x2_resume")
    assert _relative(_record(runs, "hsdp_2x2")["losses"][10:], resumed["losses"]) <= 1e-5


def test_meta_device_init_fills_each_shard_with_the_whole_models_values(runs: Path) -> None:
    ddp, meta = _record(runs, "ddp"), _record(runs, "fsdp2_dcp")
    whole = _record(runs, "fsdp2_file")  # meta_device_init: false
    hsdp = _record(runs, "hsdp")  # its model has no init_weights(): built whole
    assert (meta["built_on_meta"], whole["built_on_meta"], hsdp["built_on_meta"]) == (
        True,
        False,
        False,
    )
    # the same first loss (same initial weights) and the same updates as a whole build
    assert meta["losses"] == whole["losses"]
    assert meta["losses"][0] == pytest.approx(ddp["losses"][0], rel=1e-6)


def test_kept_parameters_checkpointing_and_regional_compile_train_like_ddp(runs: Path) -> None:
    ddp, kept = _record(runs, "ddp"), _record(runs, "fsdp2_kept_checkpointed")
    assert kept["param_type"] == "DTensor"
    assert kept["built_on_meta"]
    assert _relative(ddp["losses"], kept["losses"]) <= 1e-5
    norms = zip(ddp["grad_norms"], kept["grad_norms"], strict=True)
    assert max(abs(a - b) for a, b in norms) <= 2e-4


def test_dcp_and_file_checkpoints_resume_bit_exactly_at_2_processes(runs: Path) -> None:
    whole = _record(runs, "fsdp2_dcp")
    for name in ("dcp_resume", "file_resume"):
        resumed = _record(runs, name)
        assert resumed["losses"] == whole["losses"][10:], name
        assert resumed["ln_f"] == whole["ln_f"], name


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
    # dcp_resume saved steps 15 and 20 with async_save and KeepNCheckpoints(n=1): step 20
    # is left, with the same tensors as the synchronous save
    resumed = runs / "runs" / "dcp_resume"
    kept = sorted(p.name for p in resumed.iterdir() if not p.name.startswith(".plugtrain"))
    assert kept == ["checkpoint_20.mdl"]
    sync, background = runs / "sync.pt", runs / "async.pt"
    dcp_to_torch_save(folder / "checkpoint_20.mdl", sync)
    dcp_to_torch_save(runs / "runs" / "dcp_resume" / "checkpoint_20.mdl", background)
    a, b = (torch.load(p, weights_only=True) for p in (sync, background))
    assert _equal(a, b)


def test_a_damaged_dcp_checkpoint_is_skipped_for_the_previous_one(runs: Path, tmp_path) -> None:
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer, verify_folder

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
    assert checkpointer.prune(1) == []  # copied here: not this run's, never deleted
    for step in (10, 20):  # as if this run had written them, in step order
        checkpointer.ownership.record(tmp_path / f"checkpoint_{step}.mdl")
    assert checkpointer.prune(1) == [tmp_path / "checkpoint_10.mdl"]
    assert not (tmp_path / "checkpoint_10.mdl").exists()


def test_each_built_in_or_torch_optimizer_matches_its_whole_run_or_is_refused(runs: Path) -> None:
    from plugtrain.config.validation.sharding import supports_sharded_params
    from plugtrain.discovery.loading import get_registry

    results = json.loads((runs / "optimizers.json").read_text())
    assert len(results) == 15 + 14
    registry = get_registry()
    for name, outcome in results.items():
        if supports_sharded_params(registry, "optimizer", name):
            assert isinstance(outcome, float), (name, outcome)
            assert outcome <= 1e-6, name
        elif name.startswith("torch:"):  # torch's own error, or different weights
            assert isinstance(outcome, str) or outcome > 1e-6, (name, outcome)
        else:
            assert "cannot step sharded (DTensor) parameters" in outcome, name
    refused = sorted(n for n in results if not supports_sharded_params(registry, "optimizer", n))
    assert refused == [
        *("Adafactor", "Lamb", "Muon", "torch:Adafactor", "torch:Muon"),
        *("torch:Rprop", "torch:SparseAdam"),
    ]


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_half_precision_gathers_half_parameters_and_keeps_float32_shards(runs: Path, half) -> None:
    ddp, run = _record(runs, "ddp"), _record(runs, f"fsdp2_{half}")
    assert run["computed_in"] == [f"torch.{half}"]  # FSDP2's policy: gathered in half
    assert run["kept_in"] == ["torch.float32"]  # the shards the optimizer steps
    assert ddp["computed_in"] == ["torch.float32"]
    assert len(run["losses"]) == 20
    # half-precision rounding, not a different computation (measured: 8.5e-4 for bfloat16,
    # 2.0e-4 for float16 with its loss scaler)
    assert _relative(ddp["losses"], run["losses"]) <= 5e-3
    assert _relative(ddp["losses"], run["losses"]) > 0


def test_a_trainer_refuses_an_undeclared_optimizer_made_in_python(runs: Path) -> None:
    message = (runs / "refused.txt").read_text()
    assert message.startswith("optimizer: Lamb cannot run on sharded parameters"), message
    assert "optimizers that do:" in message
    assert "AdamW" in message


def test_optimizer_refusal_reads_the_registered_flag_of_a_class() -> None:
    from plugtrain.config.validation.sharding import optimizer_refusal
    from plugtrain.discovery.loading import get_registry

    registry = get_registry()
    assert optimizer_refusal(registry, torch.optim.AdamW, "fsdp2") is None  # torch:AdamW
    refusal = optimizer_refusal(registry, torch.optim.Rprop, "hsdp")
    assert refusal is not None
    assert refusal.startswith("torch:Rprop cannot run on sharded parameters (data_parallel: hsdp)")
    lamb = plugtrain.resolve("optimizer", "Lamb")
    assert (optimizer_refusal(registry, lamb, "fsdp2") or "").startswith("Lamb cannot")

    class Mine(torch.optim.SGD):
        pass

    assert optimizer_refusal(registry, Mine, "fsdp2") is None  # unregistered, undeclared
    Mine.supports_sharded_params = False  # type: ignore[attr-defined]
    assert (optimizer_refusal(registry, Mine, "fsdp2") or "").startswith("Mine cannot")


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
    done = run_plugtrain("check", str(run))
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


def _equal(a: Any, b: Any) -> bool:
    """Bit-for-bit: same tensors (dtype and values), same containers, same plain values."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        same = type(a) is type(b) and len(a) == len(b)
        return same and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_relayout_round_trips_bit_exactly_and_exports_the_weights(runs: Path, tmp_path) -> None:
    from safetensors.torch import load_file

    from plugtrain.cli import main
    from plugtrain.train.checkpointing.storage.relayout import (
        export_weights,
        load_any,
        relayout_checkpoint,
    )

    folder = runs / "runs" / "fsdp2_dcp" / "checkpoint_10.mdl"
    file = runs / "runs" / "fsdp2_file" / "checkpoint_10.mdl"  # the same run, gathered
    assert main(["checkpoint", "convert", str(folder), str(tmp_path / "a.mdl")]) == 0
    relayout_checkpoint(tmp_path / "a.mdl", tmp_path / "b_dcp")
    relayout_checkpoint(tmp_path / "b_dcp", tmp_path / "c.mdl")
    a, c = (torch.load(tmp_path / n, weights_only=True) for n in ("a.mdl", "c.mdl"))
    assert _equal(a, c)
    assert _equal(a, torch.load(file, weights_only=True))  # DCP of 2 processes == their file
    assert _equal(load_any(folder), load_any(tmp_path / "b_dcp"))
    export_weights(folder, tmp_path / "w.safetensors")
    assert main(["checkpoint", "export", str(file), str(tmp_path / "w.pt")]) == 0
    plain = torch.load(tmp_path / "w.pt", weights_only=True)
    assert _equal(dict(load_file(tmp_path / "w.safetensors")), plain)
    assert _equal(plain, a["model"])
    assert main(["checkpoint", "convert", str(folder), str(tmp_path / "a.mdl")]) == 1  # exists


DEEP_PLAN = """\
trainer:
  init:
    backend:
      backend_type: GPU
      enable_distributed: true
      data_parallel: fsdp2
    model:
      GPT: {n_layer: 2, n_head: 2, n_embd: 64, block_size: 16}
    optimizer:
      AdamW: {lr: 0.001}
    loop: {max_steps: 2}
  fit:
    train_dataloader:
      StdlibText: {batch_size: 4, block_size: 16}
"""


def test_deep_check_shards_on_a_fake_process_group_and_places_bad_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from plugtrain.cli import main

    run = tmp_path / "run.yaml"
    run.write_text(DEEP_PLAN)
    per_rank = {}
    for world in (8, 64):
        assert main(["check", str(run), "--world-size", str(world), "--deep"]) == 0
        out = capsys.readouterr().out
        assert f"dp_shard={world} over {world} processes; 3 fully_shard units" in out  # 2 blocks
        line = next(x for x in out.splitlines() if "per rank:" in x)
        per_rank[world] = float(line.rsplit("total ", 1)[1].split()[0])
        ddp = next(x for x in out.splitlines() if "ddp would hold" in x)
        assert per_rank[world] < float(ddp.rsplit("total ", 1)[1].split()[0]) / (world / 2)
    assert per_rank[64] < per_rank[8]
    hsdp = DEEP_PLAN.replace("fsdp2", "hsdp\n      dp_shard: 4\n      dp_replicate: 2")
    run.write_text(hsdp)
    assert main(["check", str(run), "--world-size", "8", "--deep"]) == 0
    assert "mesh dp_replicate=2 x dp_shard=4 over 8 processes" in capsys.readouterr().out
    assert main(["check", str(run), "--world-size", "16"]) == 2
    assert (
        f"{run}:7:17: trainer.init.backend.dp_shard: dp_shard x dp_replicate must equal the 16"
        in (capsys.readouterr().err)
    )
    run.write_text(hsdp.replace("dp_replicate: 2", "dp_replicate: 2\n      fsdp_modules: [x.*]"))
    assert main(["check", str(run), "--world-size", "8", "--deep"]) == 2
    err = capsys.readouterr().err
    assert f"{run}:9:22: trainer.init.backend.fsdp_modules: 'x.*' matches no submodule" in err
