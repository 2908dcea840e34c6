"""Backends and callbacks through their protocols: a third party's backend has the built-ins' power.

``ThreadsBackend`` is the example of docs/writing-plugins.md ("Writing a backend"), registered
as an in-memory plugin.
"""

from __future__ import annotations

import inspect
import logging
import sys

import attrs
import pytest
import torch

import plugtrain
from plugtrain import hookimpl
from plugtrain.backend_base import BackendBase, check_backend
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.config import load_yaml, plan_run
from plugtrain.errors import BackendError, ConfigError
from plugtrain.protocols import Backend, Callback
from plugtrain.schema import arg
from plugtrain.train.assembly.run import run_plan
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


@attrs.frozen
class ThreadsArgs:
    """Run on the CPU with a fixed number of torch threads."""

    threads: int = arg(1, gt=0, help="torch threads of this process")


class ThreadsBackend(BackendBase):
    """The CPU with a fixed number of threads."""

    backend_type = "Threads"
    schema = ThreadsArgs
    threads: int

    @property
    def device(self):
        return torch.device("cpu")

    def check_runnable(self):
        torch.set_num_threads(self.threads)


class ThreadsPlugin:
    @hookimpl
    def plugtrain_register_backends(self, registry):
        registry.register("Threads", f"{__name__}:ThreadsBackend", schema=ThreadsArgs)


@pytest.fixture
def threads(register_plugin, monkeypatch):
    monkeypatch.setitem(sys.modules, __name__, sys.modules[__name__])
    register_plugin(ThreadsPlugin(), name="threads_example")
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def _data(split="train"):
    return synthetic_loader(
        batch_size=8, num_examples=64, in_features=8, num_classes=3, split=split
    )


def _trainer(tmp_path, backend, **changes):
    sgd = plugtrain.resolve("optimizer", "SGD")
    arguments = {
        "backend": backend,
        "model_dir": tmp_path,
        "model": lambda: MLP(in_features=8, out_features=3, hidden=8),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.1),
        "loop": {"max_steps": 4, "eval_steps": 3},
        "logging": {"log_steps": 2},
        "seed": 1,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def test_the_constructor_is_derived_from_the_schema_and_validates(threads):
    assert str(inspect.signature(ThreadsBackend)) == "(threads=1)"
    with pytest.raises(ConfigError, match=r"Threads\.threads: must be > 0, got 0"):
        ThreadsBackend(threads=0)
    with pytest.raises(ConfigError, match="unknown argument 'thread'"):
        ThreadsBackend(thread=2)
    backend = plugtrain.backend("threads", threads=2)
    assert isinstance(backend, Backend)
    assert backend.threads == 2
    assert repr(backend) == "ThreadsBackend(threads=2)"
    assert ThreadsBackend.processes_per_node({"threads": 2}) == 1


def test_a_third_party_backend_trains_with_the_single_process_defaults(threads, tmp_path):
    trainer = _trainer(tmp_path, ThreadsBackend(threads=1))
    assert torch.get_num_threads() == 1  # check_runnable ran
    assert trainer.is_main_process
    metrics = trainer.fit(_data(), _data("val"))
    assert trainer.global_step == 4
    assert set(metrics) == {"loss", "accuracy"}
    # the default prepare_eval_dataloader keeps the first eval_steps batches
    evaluated = trainer.backend.prepare_eval_dataloader(_data("val"), 3)
    assert len(evaluated) == 3
    assert len(list(evaluated)) == 3


def test_a_second_backend_type_is_refused_with_the_seed_text(threads):
    plugtrain.backend("CPU")
    with pytest.raises(RuntimeError) as info:
        ThreadsBackend()
    assert str(info.value) == (
        "Cannot instantiate multiple backends. "
        "A backend with type CPU has already been instantiated."
    )


def test_a_run_file_builds_the_third_party_backend_through_the_plan(threads, tmp_path):
    text = f"""\
trainer:
  init:
    backend: {{backend_type: Threads, threads: 1}}
    model_dir: {tmp_path}
    model: {{MLP: {{in_features: 8, out_features: 3, hidden: 8}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 2}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader: {{Synthetic: {{batch_size: 8, num_examples: 32, in_features: 8,
                                     num_classes: 3}}}}
"""
    registry = plugtrain.get_registry()
    plan = plan_run(load_yaml(text.encode(), "run.yaml"), registry, "run.yaml")
    assert plan.trainers[0].backend.arguments == {"threads": 1}
    assert run_plan(plan, registry) == [{}]
    assert (tmp_path / "checkpoint_2.mdl").exists()


class HalfABackend:
    """Has a type and a device, nothing else."""

    backend_type = "CPU"
    device = torch.device("cpu")


def test_an_object_missing_protocol_members_is_refused_naming_them(tmp_path):
    with pytest.raises(BackendError) as info:
        _trainer(tmp_path, HalfABackend())
    message = str(info.value)
    assert message.startswith("HalfABackend is not a backend: it lacks is_main_process, ")
    assert "reduce_sums" in message
    assert "processes_per_node" in message
    assert "plugtrain.backend_base.BackendBase" in message


def test_the_protocol_check_does_not_evaluate_properties():
    class Lazy(ThreadsBackend):
        @property
        def device(self):
            raise AssertionError("evaluated")

    check_backend(Lazy())


# -- callbacks -------------------------------------------------------------------------------


class OnlyTheEnd:
    def __init__(self):
        self.calls = []

    def on_fit_end(self, trainer):
        self.calls.append(("fit_end", trainer.global_step))


class Everything(Callback):
    def __init__(self):
        self.calls = []

    def on_fit_start(self, trainer):
        self.calls.append("fit_start")

    def on_train_step_end(self, trainer, metrics):
        self.calls.append(f"step {trainer.global_step}")


class Misspelt:
    def on_fit_ending(self, trainer):
        raise AssertionError("never called")


def test_callbacks_define_any_subset_and_run_in_order(tmp_path):
    end, everything = OnlyTheEnd(), Everything()
    trainer = _trainer(tmp_path, "CPU", callbacks=[end, everything])
    trainer.fit(_data())
    assert end.calls == [("fit_end", 4)]
    assert everything.calls == ["fit_start", "step 2", "step 4"]


def test_a_misspelt_callback_method_is_reported(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        _trainer(tmp_path, "CPU", callbacks=[Misspelt()]).fit(_data())
    (record,) = [r for r in caplog.records if "on_fit_ending" in r.getMessage()]
    assert "Did you mean 'on_fit_end'" in record.getMessage()
