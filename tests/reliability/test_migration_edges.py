"""A Model Zoo migrant's first day: CS-X files on CPU, vocabularies, paths, Python, scaffolds.

Each case is what a new user met running Model Zoo's tutorials through plugtrain: a CS-X run
file overridden to CPU, a data vocabulary larger than the model's, a ``ckpt_path`` that names
nothing, exported weights' file modes, the run file's optimizer mapping given to the Python
``Trainer``, a package of every kind from ``plugtrain new``, and a model that shards itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.reliability import error_lines, run_cli, run_subprocess, subprocess_env

import plugtrain
from plugtrain.errors import ConfigError, TrainingError

pytestmark = pytest.mark.usefixtures("fresh_backend", "keep_registry")

CSX_RUN = """\
trainer:
  init:
    backend:
      backend_type: CSX
      cluster_config: {{num_csx: 1, num_workers_per_csx: 1, mount_dirs: [{mount}]}}
    callbacks:
      - GlobalFlags:
          csx.debug.drop_data: true
          csx.debug.fabric_type_blacklist: [cs2]
          csx.debug.compile_crd_memory_gi: 67
      - ScopedTrainFlags:
          csx.performance.micro_batch_size: 8
    model_dir: {model_dir}
    seed: 1
    model:
      MLP: {{in_features: 64, out_features: 10}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 4}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 64}}}}
"""

ON_CPU = ("--set", "trainer.init.backend.backend_type=CPU")


@pytest.mark.slow
def test_m01_a_csx_file_with_cluster_config_and_debug_flags_trains_on_cpu(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(CSX_RUN.format(mount=tmp_path, model_dir=tmp_path / "model"))
    assert run_cli("check", str(run)).status == 0  # was: csx.debug.* flags unknown keys
    checked = run_cli("check", str(run), *ON_CPU)
    assert checked.status == 0, checked.err  # was: unknown argument 'cluster_config'

    trained = run_subprocess("fit", str(run), *ON_CPU)
    assert trained.status == 0, trained.err
    assert "Traceback" not in trained.err
    lines = trained.err.splitlines()
    said = (
        "plugtrain: backend: cluster_config only acts on the CSX backend; on CPU it has no effect"
    )
    assert lines.count(said) == 1
    flags = (
        "plugtrain: the flags csx.debug.compile_crd_memory_gi, csx.debug.drop_data, "
        "csx.debug.fabric_type_blacklist only act on the CSX backend; on CPU they have no effect"
    )
    assert lines.count(flags) == 1
    assert (tmp_path / "model" / "checkpoint_4.mdl").exists()


GPT_ON_HDF5 = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 1
    model:
      GPT: {{vocab_size: 256, n_layer: 1, n_head: 2, n_embd: 16, block_size: 32}}
    optimizer:
      AdamW: {{lr: 0.001}}
    loop: {{max_steps: 3}}
  fit:
    train_dataloader:
      GptHDF5MapDataProcessor: {{data_dir: {data_dir}, batch_size: 4}}
"""


@pytest.fixture(scope="module")
def byte_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GPT HDF5 files of bytes: 257 token ids (the 256 bytes and the EOS id 256)."""
    folder = tmp_path_factory.mktemp("bytes") / "data"
    done = run_subprocess(
        "preprocess", "stdlib", "--stdlib-corpus", "20000", "--tokenizer", "bytes",
        "--max-seq-length", "32", "-o", str(folder),
    )  # fmt: skip
    assert done.status == 0, done.err
    return folder


def test_m02_a_data_vocabulary_larger_than_the_models_is_said_by_check_and_at_run_time(
    tmp_path, byte_data
):
    run = tmp_path / "run.yaml"
    run.write_text(GPT_ON_HDF5.format(model_dir=tmp_path / "model", data_dir=byte_data))
    checked = run_cli("check", str(run))
    assert checked.status == 2  # was: exit 0, then "IndexError: index out of range" at step 1
    assert error_lines(checked.err) == [
        f"{run}:7:25: trainer.init.model.GPT.vocab_size: 256 is smaller than the vocabulary "
        f"of trainer.fit.train_dataloader (257 token ids: {byte_data}/data_params.json); its "
        "token ids from 256 on have no embedding and would fail the first step (IndexError): "
        "give vocab_size at least 257"
    ]
    assert run_cli("check", str(run), "--set", "trainer.init.model.GPT.vocab_size=257").status == 0

    # From Python nothing checks the file first: the first step names both numbers.
    gpt = plugtrain.resolve("model", "GPT")
    loader = plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "python",
        model=lambda: gpt(vocab_size=256, n_layer=1, n_head=2, n_embd=16, block_size=32),
        optimizer={"AdamW": {"lr": 0.001}},
        loop={"max_steps": 3},
        seed=1,
    )
    with pytest.raises(TrainingError) as stopped:
        # the first batch holds sample 158, the first with an EOS (id 256)
        trainer.fit(loader(data_dir=str(byte_data), batch_size=160))
    assert str(stopped.value) == (
        "the batch holds token id 256 in input_ids, but the model's embedding has 256 "
        "(vocab_size 256: ids 0 to 255): the data's vocabulary is larger than the model's; "
        "give the model vocab_size at least 257, or tokenize the data with the model's "
        "tokenizer"
    )


TWO_TRAINERS = """\
trainer:
  - trainer:
      init:
        device: CPU
        model_dir: {first}
        model: {{MLP: {{in_features: 64, out_features: 10}}}}
        optimizer: {{SGD: {{lr: 0.1}}}}
        loop: {{max_steps: 2}}
      fit:
        train_dataloader: {{Digits: {{batch_size: 16}}}}
        ckpt_path: {missing}
      validate:
        val_dataloader: {{Digits: {{batch_size: 16, split: val}}}}
        ckpt_path: {first}/checkpoint_2.mdl
  - trainer:
      init:
        device: CPU
        model_dir: {second}
        model: {{MLP: {{in_features: 64, out_features: 10}}}}
        optimizer: {{SGD: {{lr: 0.1}}}}
        loop: {{max_steps: 4}}
      fit:
        train_dataloader: {{Digits: {{batch_size: 16}}}}
        ckpt_path: {first}/checkpoint_2.mdl
"""


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore this process's umask after a test that changes it."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.usefixtures("umask")
def test_m03_check_refuses_a_missing_ckpt_path_and_exports_follow_the_umask(tmp_path):
    missing = tmp_path / "pretrained" / "checkpoint_10.mdl"
    run = tmp_path / "run.yaml"
    first, second = tmp_path / "first", tmp_path / "second"
    run.write_text(TWO_TRAINERS.format(first=first, second=second, missing=missing))
    checked = run_cli("check", str(run))
    assert checked.status == 2  # was: exit 0, and fit failed after building everything
    # The checkpoints the first trainer will write are accepted (its validate, the second fit).
    assert error_lines(checked.err) == [
        f"{run}:11:20: trainer[0].trainer.fit.ckpt_path: no checkpoint at {missing} (no such "
        "file or folder); name an existing checkpoint, or leave ckpt_path unset to start from "
        "the newest in model_dir"
    ]
    run.write_text(TWO_TRAINERS.format(first=first, second=second, missing="nope.mdl"))
    relative = run_cli("check", str(run))
    cwd = os.getcwd()
    assert f"no checkpoint at nope.mdl (no such file or folder, relative to {cwd})" in relative.err

    run.write_text(TWO_TRAINERS.format(first=first, second=second, missing="null"))
    trained = run_cli("fit", str(run))
    assert trained.status == 0, trained.err
    source = second / "checkpoint_4.mdl"
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        os.umask(mask)
        for suffix in (".safetensors", ".pt"):
            target = tmp_path / f"weights-{mask:03o}{suffix}"
            assert run_cli("checkpoint", "export", str(source), str(target)).status == 0
            # was: the .safetensors file 0600 whatever the umask, the .pt file 0666 & ~umask
            assert target.stat().st_mode & 0o777 == mode, (suffix, oct(mask))


def test_m04_the_trainer_takes_the_run_files_optimizer_and_schedulers_mappings(tmp_path):
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.builtin.models import MLP

    decay = {"initial_learning_rate": 0.01, "end_learning_rate": 0.0, "total_iters": 8}
    config = {
        "optimizer": {"AdamW": {"lr": 0.01, "weight_decay": 0.1}},
        "schedulers": [{"LinearLR": decay}],
    }

    def model() -> torch.nn.Module:
        return MLP(in_features=16, out_features=4, hidden=8)

    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path,
        model=model,
        optimizer=config["optimizer"],  # was: "optimizer must be an optimizer or a callable"
        schedulers=config["schedulers"],
        loop={"max_steps": 4},
        seed=3,
    )
    torch.manual_seed(3)
    reference = plugtrain.build_optimization(model(), config)
    assert type(trainer.optimizer) is type(reference.optimizer)
    for ours, theirs in zip(
        trainer.optimizer.param_groups, reference.optimizer.param_groups, strict=True
    ):
        # the run file's build: the bias/norm split puts weight_decay 0 on the biases
        assert {k: v for k, v in ours.items() if k != "params"} == {
            k: v for k, v in theirs.items() if k != "params"
        }
    trainer.fit(synthetic_loader(batch_size=8, num_examples=64, in_features=16, num_classes=4))
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * (1 - 4 / 8))

    sgd = torch.optim.SGD(model().parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="need the optimizer written so too"):
        plugtrain.Trainer(
            device="CPU", model_dir=tmp_path / "b", model=model, optimizer=sgd,
            schedulers=config["schedulers"],
        )  # fmt: skip


def test_m05_every_kind_in_one_package_is_ruff_clean_whatever_the_names(tmp_path):
    folder = tmp_path / "all"
    words = [
        "optimizer", "ProdigyOptimizerWithWarmRestarts",
        "scheduler", "WarmupCosineLRWithHardRestarts",
        "callback", "GradientWatcherForTheWholeRun",
        "logger", "ExperimentTrackerOfTheWholeTeam",
        "backend", "RemoteClusterOfManyMachines",
        "model", "TransformerNetForLongContext",
        "dataloader", "ParquetRowsFromObjectStore",
    ]  # fmt: skip
    done = run_cli("new", *words, "--package", "acme-plugtrain-long-names", "--dir", str(folder))
    assert done.status == 0, done.err
    for command in (["ruff", "format", "--check", "."], ["ruff", "check", "."]):
        checked = subprocess.run(
            [sys.executable, "-m", *command],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        # was: "2 files would be reformatted" (tests/test_*.py lines over 100 characters)
        assert checked.returncode == 0, checked.stdout + checked.stderr


SELF_SHARDING_PLUGIN = '''\
"""A model that applies fully_shard to itself (as some third-party models do)."""

import attrs

import plugtrain
from plugtrain.schema import arg


@attrs.frozen
class SelfShardingArgs:
    """An MLP sharding itself."""

    hidden: int = arg(16, help="width")


@plugtrain.hookimpl
def plugtrain_register_models(registry):
    registry.register("SelfSharding", "self_sharding_impl:SelfSharding", schema=SelfShardingArgs)
'''

SELF_SHARDING_IMPL = """\
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard


class SelfSharding(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
        if torch.distributed.is_initialized():
            fully_shard(self)

    def forward(self, x):
        return self.net(x)
"""

TWO_PROCESSES = """\
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2{extra}}}
    model_dir: {model_dir}
    seed: 1
    model: {{SelfSharding: {{hidden: 16}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 4}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 16}}}}
"""


@pytest.mark.slow
def test_p16_a_model_that_shards_itself_is_blamed_under_ddp_and_kept_under_fsdp2(tmp_path):
    (tmp_path / "self_sharding.py").write_text(SELF_SHARDING_PLUGIN)
    (tmp_path / "self_sharding_impl.py").write_text(SELF_SHARDING_IMPL)
    env = subprocess_env(PYTHONPATH=str(tmp_path))
    run = tmp_path / "ddp.yaml"
    run.write_text(TWO_PROCESSES.format(model_dir=tmp_path / "ddp", extra=""))
    refused = run_subprocess("-p", "self_sharding", "fit", str(run), env=env, timeout=240)
    assert refused.status == 1
    assert "Traceback" not in refused.err
    assert (
        "plugtrain: error: model 'SelfSharding' from self_sharding (local) is already sharded "
        "(net.0.weight is a DTensor: the model applied fully_shard to itself), which DDP "
        "(data_parallel: ddp, the default) cannot wrap; set "
        "trainer.init.backend.data_parallel: fsdp2, under which the model's own sharding is kept"
    ) in refused.err.splitlines()  # was: "backend 'CPU' ... raised NotImplementedError: ..."
    assert "c10d.broadcast_" not in refused.err

    advised = tmp_path / "fsdp2.yaml"
    advised.write_text(
        TWO_PROCESSES.format(model_dir=tmp_path / "fsdp2", extra=", data_parallel: fsdp2")
    )
    trained = run_subprocess("-p", "self_sharding", "fit", str(advised), env=env, timeout=240)
    assert trained.status == 0, trained.err
    assert "is sharded already (fully_shard): kept as it is" in trained.err
    assert (tmp_path / "fsdp2" / "checkpoint_4.mdl").exists()
