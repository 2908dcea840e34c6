"""More than one machine, on loopback with real processes: two nodes, SLURM tasks, restarts.

Every run below trains the same 2-process CPU (gloo) job: two ``plugtrain fit`` commands as two
nodes meeting at a c10d rendezvous; one 2-process ``--standalone`` run whose rank 1 is SIGKILLed
once and restarted (``max_restarts: 1``); and two ``plugtrain fit`` processes given a faked
SLURM job step's variables (a stub ``scontrol`` on PATH records its arguments), stopped by
SIGUSR1 and started again. Their final checkpoints must be bit-equal, so each path is as exact as
the others, and close to one process taking both ranks' batches. A small local plugin (a test
double) kills a rank, sends the requeue signal and records which rank writes checkpoints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.paths import REPO

from plugtrain.errors import BackendError
from plugtrain.launching import NodeSettings, cluster
from plugtrain.launching.elastic import cluster_environment, torchrun_arguments

pytestmark = pytest.mark.slow

ROOT = REPO

DOUBLE = '''\
"""Test double: an SGD that kills or signals its own process at a step; a writer spy."""

import os
import signal
import time

import attrs

import plugtrain
from plugtrain import hookimpl
from plugtrain.train.checkpointing.storage import archive as checkpoint
from plugtrain.schema import arg

RECORD_DIR = os.environ["RECORD_DIR"]
ATTEMPT = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")


def rank():
    return os.environ.get("RANK", "alone")  # a SLURM task gets it after the plugins load


@attrs.frozen
class ActingSGDArgs:
    """SGD that kills or signals its process after a given step."""

    lr: float = arg(help="learning rate")
    momentum: float = arg(0.0, help="momentum")


def acting_sgd(params, lr, momentum=0.0):
    optimizer = plugtrain.resolve("optimizer", "SGD")(params, lr=lr, momentum=momentum)
    step = optimizer.step
    count = [0]

    def acting_step(*args, **kwargs):
        result = step(*args, **kwargs)
        count[0] += 1
        if count[0] == int(os.environ.get("ACT_STEP", "0")):
            if os.environ.get("ACT") == "kill" and rank() == "1" and ATTEMPT == "0":
                os.kill(os.getpid(), signal.SIGKILL)
            if os.environ.get("ACT") == "requeue":
                os.kill(os.getpid(), signal.SIGUSR1)
        if os.environ.get("ACT") == "requeue":
            time.sleep(0.2)  # slower than the ranks' 0.1 s agreement: they stop at this step
        return result

    optimizer.step = acting_step
    return optimizer


_save = checkpoint.save_checkpoint


def spy_save_checkpoint(path, state):
    with open(os.path.join(RECORD_DIR, "writers.txt"), "a") as out:
        out.write(f"{rank()} {os.path.basename(path)}\\n")
    return _save(path, state)


checkpoint.save_checkpoint = spy_save_checkpoint


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("ActingSGD", "acting:acting_sgd", schema=ActingSGDArgs)
'''

RUN = """\
plugins: [acting]
trainer:
  init:
    backend: {{backend_type: CPU, {backend}, dist_timeout: 30}}
    model_dir: {model_dir}
    seed: 11
    model:
      MLP: {{in_features: 16, hidden: 32, out_features: 4}}
    optimizer:
      ActingSGD: {{lr: 0.2, momentum: 0.9, exclude_from_weight_decay: false}}
    loop: {{max_steps: 6, eval_frequency: 3}}
    checkpoint: {{steps: 3}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 4, num_examples: 64, in_features: 16, num_classes: 4,
                   shuffle: false}}
    val_dataloader:
      Synthetic: {{batch_size: 10, num_examples: 64, in_features: 16, num_classes: 4,
                   split: val}}
"""

STUB_SCONTROL = """\
#!/bin/sh
echo "$@" >> "$RECORD_DIR/scontrol.txt"
"""

_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _job(root: Path, name: str, backend: str) -> tuple[Path, Path]:
    """A run file of its own ``model_dir`` and record folder under ``root/name``."""
    place = root / name
    (place / "records").mkdir(parents=True)
    (place / "acting.py").write_text(DOUBLE)
    run = place / "run.yaml"
    run.write_text(RUN.format(backend=backend, model_dir=place / "model"))
    return place, run


def _start(place: Path, args: list[str], **env: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES}
    environ = {k: v for k, v in environ.items() if not k.startswith("SLURM_")}
    environ.update(env)
    environ["RECORD_DIR"] = str(place / "records")
    environ["PYTHONPATH"] = os.pathsep.join([str(place), environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "plugtrain", "fit", *args],
        cwd=place,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, out, err


def _final_weights(place: Path) -> dict[str, torch.Tensor]:
    state = torch.load(place / "model" / "checkpoint_6.mdl", map_location="cpu", weights_only=True)
    return state["model"]


def _assert_one_writer_and_rank0_logs(place: Path, out: str) -> None:
    writers = (place / "records" / "writers.txt").read_text().splitlines()
    assert {line.split()[0] for line in writers} == {"0"}, writers
    lines = (place / "model" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines if json.loads(line)["split"] == "train"]
    assert steps == sorted(set(steps)), "a train row written twice: loggers on several ranks"
    assert steps[-1] == 6
    assert out.count("trainer 0: validation") == 1


def test_two_nodes_slurm_tasks_and_a_restarted_group_end_bit_equal(tmp_path):
    # Three runs at once: a missing peer (node 0 of 2 waits rdzv_timeout, then names the
    # endpoint), a standalone run whose rank 1 is killed once, and two nodes.
    lonely_port = _free_port()
    lonely, lonely_run = _job(
        tmp_path,
        "lonely",
        f"num_nodes: 2, rdzv_endpoint: '127.0.0.1:{lonely_port}', rdzv_timeout: 3",
    )
    alone = _start(lonely, [str(lonely_run)], NODE_RANK="0")

    # max_restarts: 1, rank 1 SIGKILLed after step 5: the group restarts from checkpoint 3.
    elastic, elastic_run = _job(tmp_path, "elastic", "num_processes: 2, max_restarts: 1")
    restarted = _start(elastic, [str(elastic_run)], ACT="kill", ACT_STEP="5")

    # Two nodes of one process each, node ranks from the environment and from --set.
    port = _free_port()
    two, two_run = _job(tmp_path, "two", f"num_nodes: 2, rdzv_endpoint: '127.0.0.1:{port}'")
    node0 = _start(two, [str(two_run)], NODE_RANK="0")
    node1 = _start(two, [str(two_run), "--set", "trainer.init.backend.node_rank=1"])
    (status0, out0, err0), (status1, out1, err1) = _finish(node0), _finish(node1)
    assert status0 == 0, err0[-3000:]
    assert status1 == 0, err1[-3000:]
    assert f"one of 2 machines meeting at 127.0.0.1:{port}" in err0
    _assert_one_writer_and_rank0_logs(two, out0 + out1)
    reference = _final_weights(two)

    status, _out, err = _finish(alone)
    assert status == 1
    assert (
        f"did not meet at the rendezvous 127.0.0.1:{lonely_port} within rdzv_timeout (3 s)" in err
    )

    status, out, err = _finish(restarted)
    assert status == 0, err[-3000:]
    assert "checkpoint_3.mdl at step 3" in err  # "resumed from .../checkpoint_3.mdl at step 3"
    _assert_one_writer_and_rank0_logs(elastic, out)
    for name, tensor in _final_weights(elastic).items():
        assert torch.equal(tensor, reference[name]), f"{name} differs after the restart"

    # Two SLURM tasks; SIGUSR1 after step 4: save, `scontrol requeue JOB`, exit; then resume.
    slurm, slurm_run = _job(tmp_path, "slurm", "num_processes: 1")
    stub = slurm / "bin"
    stub.mkdir()
    (stub / "scontrol").write_text(STUB_SCONTROL)
    (stub / "scontrol").chmod(0o755)
    job_id = str(_free_port())  # the store's port: 15000 + the job id's last four digits
    path = f"{stub}{os.pathsep}{os.environ['PATH']}"
    tasks = {
        "SLURM_JOB_ID": job_id,
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_NAME": "train",
        "PATH": path,
    }

    def start_tasks(**extra: str) -> list[tuple[int, str, str]]:
        started = [
            _start(
                slurm,
                [str(slurm_run)],
                SLURM_PROCID=str(rank),
                SLURM_LOCALID=str(rank),
                SLURM_NODEID="0",
                **tasks,
                **extra,
            )
            for rank in range(2)
        ]
        return [_finish(process) for process in started]

    first = start_tasks(ACT="requeue", ACT_STEP="4")
    assert [status for status, _, _ in first] == [138, 138], first[0][2][-3000:]
    assert "SLURM job " + job_id + " was requeued" in first[0][2]
    assert (slurm / "records" / "scontrol.txt").read_text() == f"requeue {job_id}\n"
    saved = sorted(p.name for p in (slurm / "model").glob("checkpoint_*.mdl"))
    assert saved[-1] in ("checkpoint_4.mdl", "checkpoint_5.mdl"), saved
    second = start_tasks()
    assert [status for status, _, _ in second] == [0, 0], second[1][2][-3000:]
    assert f"resumed from {slurm / 'model' / saved[-1]}" in second[0][2]
    _assert_one_writer_and_rank0_logs(slurm, second[0][1] + second[1][1])
    for name, tensor in _final_weights(slurm).items():
        assert torch.equal(tensor, reference[name]), f"{name} differs after the requeue"


# -- in process: the pieces the runs above rely on -----------------------------------------


def test_slurm_variables_become_torchruns_and_one_task_is_not_a_distributed_job():
    assert cluster.expand_nodelist("node[01-03,07],gpu5,rack[1-2]-n[8-9]") == [
        "node01", "node02", "node03", "node07", "gpu5",
        "rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9",
    ]  # fmt: skip
    with pytest.raises(BackendError, match="not a number or a range"):
        cluster.expand_nodelist("node[a-b]")
    step = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "4567891",
        "SLURM_JOB_NODELIST": "gpu[007-008]",
        "SLURM_JOB_NAME": "train",
    }
    assert cluster.torchrun_variables(step) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "GROUP_RANK": "1",
        "NODE_RANK": "1",
        "MASTER_ADDR": "gpu007",
        "MASTER_PORT": "22891",
    }
    assert cluster.tasks_per_node(step) is None
    assert cluster.tasks_per_node({**step, "SLURM_NNODES": "2"}) == 2
    assert cluster.tasks_per_node({**step, "SLURM_NTASKS_PER_NODE": "4"}) == 4
    auto = NodeSettings()
    assert cluster_environment(auto, step) == "slurm"
    assert cluster_environment(auto, {**step, "SLURM_NTASKS": "1"}) == "none"
    assert cluster_environment(auto, {**step, "SLURM_JOB_NAME": "bash"}) == "none"
    assert cluster_environment(auto, {**step, "RANK": "0", "WORLD_SIZE": "2"}) == "torchrun"
    assert cluster_environment(NodeSettings(cluster_environment="none"), step) == "none"
    with pytest.raises(BackendError, match="SLURM_PROCID is not set"):
        cluster_environment(NodeSettings(cluster_environment="slurm"), {})


def test_torchrun_gets_the_c10d_rendezvous_for_several_nodes(monkeypatch):
    monkeypatch.delenv("NODE_RANK", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert torchrun_arguments(2, NodeSettings(max_restarts=1)) == [
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
    ]
    nodes = NodeSettings(num_nodes=2, rdzv_endpoint="n0:29400", rdzv_timeout=7.5, node_rank=1)
    assert torchrun_arguments(4, nodes) == [
        "--nnodes=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=n0:29400",
        "--rdzv-id=plugtrain",
        "--rdzv-conf=join_timeout=8,read_timeout=8,is_host=false",
        "--nproc-per-node=4",
        "--max-restarts=0",
    ]
    with pytest.raises(BackendError, match="num_nodes=2 needs rdzv_endpoint"):
        torchrun_arguments(1, NodeSettings(num_nodes=2))
    monkeypatch.setenv("NODE_RANK", "5")
    with pytest.raises(BackendError, match="NODE_RANK='5' must be a node index below"):
        torchrun_arguments(1, NodeSettings(num_nodes=2, rdzv_endpoint="n0:1"))


def test_check_places_bad_node_keys_in_the_run_file(tmp_path, capsys):
    from plugtrain.cli import main

    run = tmp_path / "run.yaml"
    run.write_text(
        "trainer:\n"
        "  init:\n"
        "    backend: {backend_type: GPU, num_nodes: 2, node_rank: 2,\n"
        "              rdzv_endpoint: node0, requeue_signal: SIGKILL}\n"
        "    model: {MLP: {in_features: 4, out_features: 2}}\n"
        "  validate:\n"
        "    val_dataloader: {Synthetic: {batch_size: 2, in_features: 4, num_classes: 2}}\n"
    )
    assert main(["check", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}:4:53: trainer.init.backend.requeue_signal: must be one of 'SIGUSR1'" in err
    run.write_text(run.read_text().replace(", requeue_signal: SIGKILL", ""))
    assert main(["check", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run}:4:15: trainer.init.backend.rdzv_endpoint: rdzv_endpoint must look like" in err
    assert f"{run}:3:48: trainer.init.backend.node_rank: node_rank must be below num_nodes" in err
    assert f"{run}:3:34: trainer.init.backend.num_nodes: num_nodes above 1 needs" in err
    fixed = run.read_text().replace("node_rank: 2", "enable_distributed: true, nnodes: 2")
    run.write_text(fixed.replace("node0", "node0:29400").replace("num_nodes: 2, ", ""))
    assert main(["check", str(run)]) == 0


def test_each_restart_attempt_of_an_outside_torchrun_gets_its_own_store_namespace():
    import datetime

    import torch.distributed as dist

    from plugtrain_backends._parallel import attempt_store

    server = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
    torchrun = {
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RUN_ID": "job",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(server.port),
        "WORLD_SIZE": "1",
        "RANK": "0",
    }
    timeout = datetime.timedelta(seconds=10)
    for attempt in ("0", "1"):
        store = attempt_store(timeout, {**torchrun, "TORCHELASTIC_RESTART_COUNT": attempt})
        assert store is not None
        store.set("rank_0", f"address of attempt {attempt}")
    assert server.get("plugtrain/job/attempt_0/rank_0") == b"address of attempt 0"
    assert server.get("plugtrain/job/attempt_1/rank_0") == b"address of attempt 1"
    # plugtrain fit's own torchrun makes a fresh store per round; several machines: no prefix
    assert attempt_store(timeout, {**torchrun, "TORCHELASTIC_USE_AGENT_STORE": "False"}) is None
    assert attempt_store(timeout, {**torchrun, "GROUP_WORLD_SIZE": "2"}) is None
