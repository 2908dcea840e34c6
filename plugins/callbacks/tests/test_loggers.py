"""The loggers, read back with each tool's own reader: TensorBoard, wandb (offline), MLflow."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from plugtrain_callbacks.mlflow_logger import MLflowLogger
from plugtrain_callbacks.tensorboard import TensorBoardLogger
from plugtrain_callbacks.wandb_logger import WandbLogger

from plugtrain.errors import ConfigError

# A safety net against a hung subprocess or server, not a performance assertion.
DEADLINE_S = 180


def _scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``directory``, by tag, read by TensorBoard's reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_tensorboard_events_hold_every_logged_scalar(make_trainer, train_data, rows, tmp_path):
    trainer = make_trainer(
        loggers=[TensorBoardLogger()], loop={"max_steps": 4, "eval_frequency": 2}
    )
    trainer.fit(train_data(), train_data("val"))
    scalars = _scalars(tmp_path / "run" / "events")
    for split in ("train", "val"):
        for record in rows(tmp_path / "run", split):
            for name, value in record.items():
                if name in ("step", "split", "time"):
                    continue
                found = dict(scalars[f"{split}/{name}"])
                assert found[record["step"]] == pytest.approx(value, rel=1e-6)  # float32
    assert [step for step, _ in scalars["train/loss"]] == [2, 4]


def test_tensorboard_summary_dir_and_legacy_dirs(make_trainer, train_data, tmp_path):
    make_trainer(
        loggers=[TensorBoardLogger(summary_dir=str(tmp_path / "tb"))],
        loop={"max_steps": 2},
    ).fit(train_data())
    assert [s for s, _ in _scalars(tmp_path / "tb")["train/loss"]] == [2]
    make_trainer(
        model_dir=tmp_path / "legacy",
        loggers=[TensorBoardLogger(legacy_event_dirs=True)],
        loop={"max_steps": 2},
    ).fit(train_data(), train_data("val"))
    assert [s for s, _ in _scalars(tmp_path / "legacy" / "train")["loss"]] == [2]
    assert [s for s, _ in _scalars(tmp_path / "legacy" / "eval")["loss"]] == [2]


def test_tensorboard_purges_replayed_steps_on_resume(make_trainer, train_data, tmp_path):
    make_trainer(loggers=[TensorBoardLogger()]).fit(train_data())
    (tmp_path / "run" / "checkpoint_6.mdl").unlink()  # as if killed after step 6 was logged
    make_trainer(loggers=[TensorBoardLogger()]).fit(train_data())
    assert [s for s, _ in _scalars(tmp_path / "run" / "events")["train/loss"]] == [2, 4, 6]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_real_tensorboard_server_serves_the_scalars(make_trainer, train_data, rows, tmp_path):
    make_trainer(loggers=[TensorBoardLogger()]).fit(train_data())
    expected = [(r["step"], r["loss"]) for r in rows(tmp_path / "run")]
    port = _free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path / "run")]
    command += ["--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    query = urllib.parse.urlencode({"run": "events", "tag": "train/loss"})
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"
    try:
        deadline = time.monotonic() + DEADLINE_S
        served = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    served = json.loads(response.read())
                if served:
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
    finally:
        server.kill()
        output = server.communicate()[0].decode(errors="replace")
    assert served, f"tensorboard served nothing at {url}:\n{output}"
    assert [(step, value) for _, step, value in served] == [
        (step, pytest.approx(loss, rel=1e-6)) for step, loss in expected
    ]


# -- wandb, offline --------------------------------------------------------------------------


def _wandb_history(run_file: Path) -> list[dict[str, object]]:
    """The history rows of an offline run's ``.wandb`` file, decoded with wandb's own protobufs.

    The file is wandb's record log: a 7-byte header, then 32 KiB blocks of records, each with a
    7-byte header (checksum, length, type: full, first, middle, last).
    """
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending, history = 32768, 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                history.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items}
                )
    return history


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


@pytest.mark.slow
@pytest.mark.usefixtures("offline_wandb")
def test_wandb_offline_run_holds_the_metrics_and_a_resume_continues_it(
    make_trainer, train_data, rows, tmp_path
):
    arguments = {"project": "plugtrain-test", "run_name": "tiny", "tags": ["cpu"], "group": "g"}
    make_trainer(loggers=[WandbLogger(**arguments, job_type="train")], loop={"max_steps": 4}).fit(
        train_data()
    )
    (first,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    run_id = first.name.removeprefix("run-").removesuffix(".wandb")
    make_trainer(loggers=[WandbLogger(**arguments)], loop={"max_steps": 6}).fit(train_data())
    import wandb

    wandb.teardown()  # waits until wandb's service process has written every run file
    # Sorted by folder name, which starts with the start time; a resume within the same second
    # gets the suffix -1, which sorts after the first folder too.
    logs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 2
    assert {log.name for log in logs} == {f"run-{run_id}.wandb"}  # the same run, continued
    history = []
    for log in logs:
        history += _wandb_history(log)
    logged = [(h["global_step"], h["train/loss"]) for h in history]
    assert logged == [(r["step"], pytest.approx(r["loss"])) for r in rows(tmp_path / "run")]
    with pytest.raises(ConfigError, match="resume is 'never'"):
        make_trainer(loggers=[WandbLogger(resume="never")], loop={"max_steps": 8}).fit(train_data())


def _wandb_run_record(run_file: Path) -> object:
    """The run record (id, entity, project ...) of an offline ``.wandb`` file."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    _checksum, length, kind = struct.unpack("<IHB", data[7:14])
    assert kind == 1  # the header record, whole
    position = 14 + length
    _checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
    record = wandb_internal_pb2.Record()
    record.ParseFromString(data[position + 7 : position + 7 + length])
    assert record.WhichOneof("record_type") == "run"
    return record.run


@pytest.mark.slow
@pytest.mark.usefixtures("offline_wandb")
def test_wandb_run_id_entity_and_the_rest_reach_the_run(make_trainer, train_data, tmp_path):
    import wandb

    logger = WandbLogger(
        project="proj",
        group="grp",
        run_id="fixedid1",
        run_name="named",
        job_type="jt",
        tags=["t1", "t2"],
        resume="allow",
        entity="acme-team",
    )
    make_trainer(loggers=[logger], loop={"max_steps": 2}).fit(train_data())
    wandb.teardown()
    (run_dir,) = (tmp_path / "run" / "wandb").glob("offline-run-*-fixedid1")
    run = _wandb_run_record(run_dir / "run-fixedid1.wandb")
    assert (run.run_id, run.project, run.entity, run.display_name) == (
        "fixedid1",
        "proj",
        "acme-team",
        "named",
    )
    assert (run.run_group, run.job_type, list(run.tags)) == ("grp", "jt", ["t1", "t2"])


def test_a_resume_within_the_same_second_continues_the_run_id_not_the_folder_suffix(tmp_path):
    from plugtrain_callbacks.wandb_logger import _previous_run_id

    first = tmp_path / "wandb" / "offline-run-20261201_171500-abc12345"
    again = tmp_path / "wandb" / "offline-run-20261201_171500-abc12345-1"  # as wandb names it
    for folder, when in ((first, 1_000_000), (again, 1_000_005)):
        folder.mkdir(parents=True)
        log = folder / "run-abc12345.wandb"
        log.write_bytes(b"")
        os.utime(log, (when, when))
    assert _previous_run_id(tmp_path) == "abc12345"
    assert _previous_run_id(tmp_path / "elsewhere") is None


def test_wandb_arguments_are_checked():
    with pytest.raises(ConfigError, match="resume"):
        WandbLogger(resume="sometimes")
    with pytest.raises(ConfigError, match="tags"):
        WandbLogger(tags="one")


# -- MLflow, a local store -------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_local_store_holds_the_metrics_and_a_resume_continues_the_run(
    make_trainer, train_data, rows, tmp_path
):
    from mlflow.tracking import MlflowClient

    logger = MLflowLogger(experiment_name="tiny", run_name="first", tags={"kind": "test"})
    make_trainer(loggers=[logger], loop={"max_steps": 4}).fit(train_data())
    make_trainer(loggers=[MLflowLogger(experiment_name="tiny")]).fit(train_data())
    client = MlflowClient((tmp_path / "run" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("tiny")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "first"
    assert run.data.tags["kind"] == "test"
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "train/loss")
    logged = sorted((m.step, m.value) for m in history)
    assert logged == [(r["step"], pytest.approx(r["loss"])) for r in rows(tmp_path / "run")]


def test_mlflow_explicit_tracking_uri(make_trainer, train_data, tmp_path):
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "elsewhere").as_uri()
    make_trainer(loggers=[MLflowLogger(tracking_uri=store)], loop={"max_steps": 2}).fit(
        train_data()
    )
    assert not (tmp_path / "run" / "mlruns").exists()
    experiment = MlflowClient(store).get_experiment_by_name("plugtrain")
    assert experiment is not None


# -- a missing extra -------------------------------------------------------------------------

BLOCKER = """\
import importlib.abc, sys

MISSING = sys.argv.pop(1)

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from plugtrain.cli import main
sys.exit(main(sys.argv[1:]))
"""

RUN = """\
trainer:
  init:
    device: CPU
    model: {MLP: {in_features: 8, out_features: 3}}
    optimizer: {SGD: {lr: 0.1}}
    loop: {max_steps: 2}
    loggers:
      - LOGGER: {}
  fit:
    train_dataloader: {Synthetic: {batch_size: 8, in_features: 8, num_classes: 3}}
"""


@pytest.mark.parametrize(
    ("logger", "module", "extra"),
    [
        ("TensorBoardLogger", "tensorboard", "tensorboard"),
        ("WandbLogger", "wandb", "wandb"),
        ("MLflowLogger", "mlflow", "mlflow"),
    ],
)
def test_a_missing_extra_is_a_check_error_naming_it_with_an_import_blocker(
    tmp_path, logger, module, extra
):
    run = tmp_path / "run.yaml"
    run.write_text(textwrap.dedent(RUN).replace("LOGGER", logger))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, module, "check", str(run)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 2, done.stderr
    column = 11 + len(logger)  # the arguments of "- LOGGER: {}"
    assert f"{run}:8:{column}: trainer.init.loggers[0].{logger}:" in done.stderr
    assert f"pip install plugtrain-callbacks[{extra}]" in done.stderr
    assert "Traceback" not in done.stderr
