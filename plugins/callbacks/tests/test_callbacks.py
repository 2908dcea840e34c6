"""The callbacks of plugtrain-callbacks, each in a real (tiny) training run on CPU."""

from __future__ import annotations

import logging
import math
import textwrap

import pytest
import torch
from plugtrain_callbacks.checkpoints import KeepNCheckpoints, LoadCheckpointStates
from plugtrain_callbacks.checks import CheckLoss
from plugtrain_callbacks.flags import GlobalFlags, ScopedTrainFlags, ScopedValidateFlags
from plugtrain_callbacks.norms import ComputeNorm
from plugtrain_callbacks.optimizer import LogOptimizerParamGroup
from plugtrain_callbacks.rate import RateProfiler

import plugtrain
import plugtrain.bases.backend
from plugtrain.config import check_run, load_yaml
from plugtrain.errors import ConfigError, TrainingError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint


class TotalGradNorm:
    """Reference: torch's own total norm of the same gradients, at the same point."""

    def __init__(self):
        self.by_step = {}

    def on_before_optimizer_step(self, trainer, optimizer):
        grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        self.by_step[trainer.global_step + 1] = float(torch.nn.utils.get_total_norm(grads))


def test_compute_norm_logs_the_gradient_and_weight_norms(make_trainer, train_data, rows, tmp_path):
    reference = TotalGradNorm()
    trainer = make_trainer(callbacks=[ComputeNorm(), reference])
    trainer.fit(train_data())
    records = rows(tmp_path / "run")
    assert [r["step"] for r in records] == [2, 4, 6]
    for record in records:
        assert record["model_wise_grad_norm"] == pytest.approx(
            reference.by_step[record["step"]], rel=1e-6
        )
        saved = load_checkpoint(tmp_path / "run" / f"checkpoint_{record['step']}.mdl")["model"]
        weights = torch.cat([v.flatten() for v in saved.values()])
        assert record["model_wise_params_norm"] == pytest.approx(
            float(torch.linalg.vector_norm(weights)), rel=1e-6
        )


class PreClipNorm:
    """Reference: the total norm before clipping, measured on a copy of the step's gradients."""

    def __init__(self):
        self.by_step = {}

    def on_train_step_start(self, trainer, step):
        self.step = step

    def on_before_optimizer_step(self, trainer, optimizer):
        self.by_step[self.step] = trainer.precision.last_grad_norm


def test_compute_norm_logs_the_norm_before_clipping_as_model_zoo(
    make_trainer, train_data, rows, tmp_path
):
    reference, clipped = PreClipNorm(), TotalGradNorm()
    trainer = make_trainer(
        callbacks=[ComputeNorm(), reference, clipped], precision={"max_gradient_norm": 0.01}
    )
    trainer.fit(train_data())
    for record in rows(tmp_path / "run"):
        step = record["step"]
        assert reference.by_step[step] > 0.01  # the gradients were really clipped
        assert record["model_wise_grad_norm"] == pytest.approx(reference.by_step[step], rel=1e-5)
        assert record["model_wise_grad_norm_clipped"] == pytest.approx(
            clipped.by_step[step], rel=1e-6
        )
        assert record["model_wise_grad_norm_clipped"] == pytest.approx(0.01, rel=1e-4)


def test_compute_norm_per_layer_grad_norms_add_up(make_trainer, train_data, rows, tmp_path):
    class Layered(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)])

        def forward(self, x):
            return self.layers[1](torch.relu(self.layers[0](x)))

    make_trainer(model=Layered, callbacks=[ComputeNorm()]).fit(train_data())
    for record in rows(tmp_path / "run"):
        parts = [record["per_layer_grad_norm/layer_0"], record["per_layer_grad_norm/layer_1"]]
        total = math.sqrt(sum(p * p for p in parts))
        assert total == pytest.approx(record["model_wise_grad_norm"], rel=1e-6)


class NaNAt:
    """A data loader whose batch ``bad`` (counted over the run) has NaN inputs."""

    def __init__(self, loader, bad):
        self.loader, self.bad, self.count = loader, bad, 0

    def __iter__(self):
        for inputs, targets in self.loader:
            self.count += 1
            yield (torch.full_like(inputs, math.nan) if self.count == self.bad else inputs), targets

    def __len__(self):
        return len(self.loader)


def test_check_loss_stops_on_a_step_that_skip_step_would_drop(make_trainer, train_data, tmp_path):
    loop = {"max_steps": 6, "nan_policy": "skip_step"}
    make_trainer(loop=loop).fit(NaNAt(train_data(), 3))  # without CheckLoss: one step skipped
    trainer = make_trainer(loop=loop, callbacks=[CheckLoss()], model_dir=tmp_path / "checked")
    with pytest.raises(TrainingError, match="NaN or inf loss detected in 1 of the steps up to"):
        trainer.fit(NaNAt(train_data(), 3))
    assert trainer.global_step == 4  # stopped at the record of steps 3-4


def test_check_loss_stops_on_a_non_finite_validation_loss(make_trainer, train_data, tmp_path):
    trainer = make_trainer(callbacks=[CheckLoss()], model_dir=tmp_path / "v")
    with pytest.raises(TrainingError, match="nan validation loss detected at step 6"):
        trainer.fit(train_data(), NaNAt(train_data("val"), 1))


def test_log_optimizer_param_group(make_trainer, train_data, rows, tmp_path):
    make_trainer(callbacks=[LogOptimizerParamGroup(keys=["lr", "momentum"])]).fit(train_data())
    (first, *_) = rows(tmp_path / "run")
    assert first["lr/0"] == pytest.approx(0.1)
    assert first["momentum/0"] == pytest.approx(0.9)
    with pytest.raises(ConfigError, match="no param group has betas"):
        make_trainer(callbacks=[LogOptimizerParamGroup(keys="betas")]).fit(train_data())
    with pytest.raises(ConfigError, match="must name at least one param-group key"):
        LogOptimizerParamGroup(keys=[])


def test_keep_n_checkpoints_keeps_the_newest_across_a_resume(make_trainer, train_data, tmp_path):
    make_trainer(callbacks=[KeepNCheckpoints(n=2)]).fit(train_data())
    names = sorted(p.name for p in (tmp_path / "run").glob("checkpoint_*.mdl"))
    assert names == ["checkpoint_4.mdl", "checkpoint_6.mdl"]
    make_trainer(callbacks=[KeepNCheckpoints(n=2)], loop={"max_steps": 10}).fit(train_data())
    names = sorted(p.name for p in (tmp_path / "run").glob("checkpoint_*.mdl"))
    assert names == ["checkpoint_10.mdl", "checkpoint_8.mdl"]
    with pytest.raises(ConfigError, match="n: must be > 0"):
        KeepNCheckpoints(n=0)


def test_keep_n_checkpoints_without_n_keeps_all(make_trainer, train_data, tmp_path):
    make_trainer(callbacks=[KeepNCheckpoints()]).fit(train_data())
    assert len(list((tmp_path / "run").glob("checkpoint_*.mdl"))) == 3


def test_load_checkpoint_states_model_only(make_trainer, train_data, tmp_path):
    make_trainer().fit(train_data())
    saved = load_checkpoint(tmp_path / "run" / "checkpoint_6.mdl")
    trainer = make_trainer(callbacks=[LoadCheckpointStates(load_checkpoint_states="model")])
    trainer.load_checkpoint(tmp_path / "run" / "checkpoint_6.mdl")
    assert trainer.global_step == 0
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, saved["model"][name])
    momentum = [s.get("momentum_buffer") for s in trainer.optimizer.state.values()]
    assert all(m is None or float(m.abs().sum()) == 0.0 for m in momentum)


def test_load_checkpoint_states_spellings_and_errors(caplog):
    both = LoadCheckpointStates(load_checkpoint_states="model, lr_scheduler")
    assert both.load_checkpoint_states == {"model", "schedulers"}
    assert LoadCheckpointStates(["optimizer", "global_step"]).load_checkpoint_states == {
        "optimizer",
        "global_step",
    }
    assert LoadCheckpointStates().load_checkpoint_states is None
    with pytest.raises(ConfigError, match="unknown checkpoint state 'weights'"):
        LoadCheckpointStates("model,weights")
    state = {"model": 1, "optimizer": 2, "callbacks": 3}
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        LoadCheckpointStates("model,grad_scaler").on_before_load_checkpoint(None, state)
    assert state == {"model": 1}
    assert "the checkpoint has no grad_scaler to load" in caplog.text


def test_rate_profiler(make_trainer, train_data, rows, tmp_path):
    make_trainer(callbacks=[RateProfiler()]).fit(train_data())
    for record in rows(tmp_path / "run"):
        per_step = record["rate/samples_per_second"] / record["rate/steps_per_second"]
        assert per_step == pytest.approx(8.0, rel=1e-9)  # 8 examples per batch
        assert record["rate/avg_samples_per_second"] > 0


def test_flags_on_cpu_are_reported_once_as_inactive(make_trainer, train_data, caplog, monkeypatch):
    # once per process: a fit earlier in this process (an in-process run file) may have said it
    monkeypatch.setattr(plugtrain.bases.backend, "_REPORTED_FLAGS", set())
    flags = {"csx.performance.micro_batch_size": 2}
    callbacks = [GlobalFlags(**flags), ScopedTrainFlags(**flags), ScopedValidateFlags(**flags)]
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        make_trainer(callbacks=callbacks, loop={"max_steps": 4, "eval_frequency": 2}).fit(
            train_data(), train_data("val")
        )
    reports = [r for r in caplog.records if "only act on the CSX backend" in r.getMessage()]
    assert len(reports) == 1
    assert "csx.performance.micro_batch_size" in reports[0].getMessage()


class HoldsABackend:
    """What the flag callbacks read of a trainer: its backend (a CSX backend needs a cluster)."""

    def __init__(self, backend):
        self.backend = backend


def test_flags_reach_the_csx_backend_and_scoped_ones_are_restored_without_a_cluster(
    fresh_backend,
):
    backend = plugtrain.backend("CSX")
    holder = HoldsABackend(backend)
    GlobalFlags(**{"csx.debug.retrace_every_iteration": True}).on_fit_start(holder)
    scoped = ScopedTrainFlags(
        **{"csx.performance.micro_batch_size": "auto", "csx.debug.retrace_every_iteration": False}
    )
    scoped.on_fit_start(holder)
    assert backend.flags == {
        "csx.debug.retrace_every_iteration": False,
        "csx.performance.micro_batch_size": "auto",
    }
    scoped.on_fit_end(holder)
    assert backend.flags == {"csx.debug.retrace_every_iteration": True}
    validate = ScopedValidateFlags(**{"csx.performance.micro_batch_size": 4})
    validate.on_validate_start(holder)
    assert backend.flags["csx.performance.micro_batch_size"] == 4
    validate.on_validate_end(holder, {})
    assert "csx.performance.micro_batch_size" not in backend.flags


def test_flag_values_and_names_are_checked():
    with pytest.raises(ConfigError, match="must be a positive int, auto or explore"):
        ScopedTrainFlags(**{"csx.performance.micro_batch_size": "big"})
    with pytest.raises(ConfigError, match=r"Did you mean 'csx\.performance\.micro_batch_size'"):
        GlobalFlags(**{"csx.performance.micro_batch_sise": 2})


RUN = """\
trainer:
  init:
    device: CPU
    model: {MLP: {in_features: 8, out_features: 3}}
    optimizer: {SGD: {lr: 0.1}}
    loop: {max_steps: 4}
    callbacks:
      - ScopedTrainFlags:
          csx.performance.micro_batch_size: 0
      - LoadCheckpointStates: {load_checkpoint_states: "model,weights"}
      - KeepNCheckpoints: {n: -1}
      - LogOptimizerParamGroup: {}
      - ComputeNorm: {every: 2}
  fit:
    train_dataloader: {Synthetic: {batch_size: 8, in_features: 8, num_classes: 3}}
"""


def test_run_file_arguments_are_checked_with_positions(installed_registry):
    with pytest.raises(ConfigError) as info:
        check_run(load_yaml(textwrap.dedent(RUN).encode(), "run.yaml"), installed_registry)
    found = {(i.path, i.location): i.message for i in info.value.issues}
    prefix = "trainer.init.callbacks"
    assert found == {
        (f"{prefix}[0].ScopedTrainFlags.csx.performance.micro_batch_size", "run.yaml:9:11"): (
            "must be a positive int, auto or explore, got 0"
        ),
        (f"{prefix}[1].LoadCheckpointStates.load_checkpoint_states", "run.yaml:10:32"): (
            "unknown checkpoint state 'weights'; accepted: all, or any of model, optimizer, "
            "schedulers, grad_scaler, global_step, dataloader, sparsity"
        ),
        (f"{prefix}[2].KeepNCheckpoints.n", "run.yaml:11:31"): "must be > 0, got -1",
        (f"{prefix}[3].LogOptimizerParamGroup.keys", "run.yaml:12:33"): (
            "missing required argument 'keys'"
        ),
        (f"{prefix}[4].ComputeNorm.every", "run.yaml:13:23"): (
            "unknown argument 'every'. Accepted: none."
        ),
    }


EVERY_FLAG = {
    "csx.performance.micro_batch_size": "explore",
    "csx.performance.transfer_processes": 4,
    "csx.precision.optimization_level": 1,
    "csx.debug.debug_args": {"debug_crd": {"x": 1}},
    "csx.debug.ini": {"ws_opt_x": True},
    "csx.debug.retrace_every_iteration": True,
    "csx.debug.lazy_initialization": False,
    "csx.debug.log_initialization": True,
    "csx.debug.compile_crd_memory_gi": 10,
    "csx.debug.execute_crd_memory_gi": 11,
    "csx.debug.wrk_memory_gi": 12,
    "csx.debug.act_memory_gi": 13,
    "csx.debug.cmd_memory_gi": 14,
    "csx.debug.wgt_memory_gi": 15,
}


@pytest.mark.parametrize("callback", [GlobalFlags, ScopedTrainFlags, ScopedValidateFlags])
def test_every_known_flag_is_accepted_under_its_dotted_name(callback):
    assert callback(**EVERY_FLAG).flags == EVERY_FLAG


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("csx.performance.transfer_processes", 0, "must be > 0"),
        ("csx.precision.optimization_level", 3, "must be <= 2"),
        ("csx.debug.retrace_every_iteration", "yes", "must be of type bool"),
        ("csx.debug.wgt_memory_gi", -1, "must be > 0"),
    ],
)
def test_flag_values_are_checked(flag, value, message):
    with pytest.raises(ConfigError, match=message):
        GlobalFlags(**{flag: value})
