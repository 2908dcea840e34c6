"""The scheduler contract in the core: any scheduler meeting the protocol is a first-class one.

Fast, in-process companions of ``tests/integration/test_third_party_scheduler.py`` (which pip
installs a third-party scheduler): the base's old paths, schedulers the core has never seen in
the Trainer's overlap check and in the wrappers, the checkpoint state rule at the first save,
``check`` refusing a child a wrapper cannot take, plot stepping a torch scheduler, and errors
raised by a plugin's code named after the plugin.
"""

from __future__ import annotations

import attrs
import pytest
import torch

import plugtrain
import plugtrain.protocols
from plugtrain import hookimpl
from plugtrain.authoring.schedule_plot import schedule_curves
from plugtrain.bases.param_groups import build_param_groups
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.config import check_run, load_yaml
from plugtrain.discovery.attribution import attribute_error
from plugtrain.errors import CheckpointError, ComponentError, ConfigError
from plugtrain.schema import arg
from plugtrain.train.components.building import build_component
from plugtrain.train.trainer import Trainer

pytest.importorskip("plugtrain_schedulers", reason="plugtrain-schedulers is not installed")

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _optimizer(*tags: object, lr: float = 1.0) -> torch.optim.SGD:
    groups = []
    for tag in tags:
        group: dict = {"params": [torch.zeros(2, requires_grad=True)]}
        if tag is not ...:
            group["tags"] = tag
        groups.append(group)
    return torch.optim.SGD(groups, lr=lr)


# -- the base lives in the core -------------------------------------------------------------


def test_built_schedulers_are_torch_lr_schedulers_of_the_registered_class():
    """Trainers that accept only torch's schedulers (Lightning's isinstance check) take ours."""
    cosine = plugtrain.resolve("scheduler", "CosineAnnealingLR")
    sequential = plugtrain.resolve("scheduler", "SequentialLR")
    optimizer = _optimizer(...)
    child = cosine(optimizer, initial_learning_rate=0.1, T_max=10)
    outer = sequential(
        optimizer, schedulers=[child, {"ConstantLR": {"learning_rate": 0.01}}], milestones=[5]
    )
    for built, registered in ((child, cosine), (outer, sequential)):
        assert isinstance(built, torch.optim.lr_scheduler.LRScheduler)
        assert isinstance(built, registered)
        assert type(built).__name__ == registered.__name__
        assert type(built).__module__ == registered.__module__
        assert type(built).__mro__[1] is registered
    assert type(cosine(optimizer, initial_learning_rate=0.1, T_max=10)) is type(child)
    assert not issubclass(cosine, torch.optim.lr_scheduler.LRScheduler)
    outer.step()
    assert outer.get_last_lr() == [child.value(1)]
    assert optimizer.param_groups[0]["lr"] == child.value(1)


def test_the_builtin_schedulers_are_built_on_the_core():
    import plugtrain.scheduler

    linear = plugtrain.resolve("scheduler", "LinearLR")
    assert issubclass(linear, plugtrain.scheduler.Scheduler)
    assert isinstance(linear(_optimizer(...), 1.0, 0.0, 4), plugtrain.protocols.Scheduler)
    exponential = torch.optim.lr_scheduler.ExponentialLR(_optimizer(...), 0.5)
    assert isinstance(exponential, plugtrain.protocols.Scheduler)


# -- a scheduler the core does not know -----------------------------------------------------


class TaggedOnly:
    """Meets the protocol without the core's base and without ``group_indices``."""

    def __init__(self, optimizer: torch.optim.Optimizer, param_group_tags: object) -> None:
        self.optimizer = optimizer
        self.param_group_tags = param_group_tags

    def step(self) -> None:
        """Writes nothing."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore."""

    def get_last_lr(self) -> list[float]:
        return []


def _model() -> MLP:
    return MLP(in_features=4, out_features=2, hidden=4)


def _tagged_optimizer(model: torch.nn.Module) -> torch.optim.SGD:
    return plugtrain.resolve("optimizer", "SGD")(
        build_param_groups(model, [{"params": "*bias", "tag": "bias_params"}]),
        lr=0.1,
    )


def test_the_overlap_check_reads_the_tags_of_an_unknown_scheduler(tmp_path):
    constant = plugtrain.resolve("scheduler", "ConstantLR")

    def schedulers(tags: object) -> list:
        return [
            lambda o: constant(o, learning_rate=0.5, param_group_tags="bias_params"),
            lambda o: TaggedOnly(o, tags),
        ]

    common = {"device": "CPU", "model_dir": tmp_path, "model": _model, "seed": 0}
    trainer = Trainer(**common, optimizer=_tagged_optimizer, schedulers=schedulers([None]))
    assert len(trainer.schedulers) == 2  # disjoint: untagged groups vs bias_params
    with pytest.raises(ConfigError, match="both set 'lr' of param group 1"):
        Trainer(**common, optimizer=_tagged_optimizer, schedulers=schedulers(None))


def test_a_nested_run_file_child_disturbs_no_other_group():
    """Children are built for the wrapper without leaving their first value in other groups."""
    registry = plugtrain.discovery.loading.get_registry()
    optimizer = _optimizer(..., "bias", lr=0.5)
    build_component(
        registry,
        "scheduler",
        {"ConstantLR": {"learning_rate": 5.0, "param_group_tags": "bias"}},
        optimizer,
    )
    build_component(
        registry,
        "scheduler",
        {
            "SequentialLR": {
                "param_group_tags": [None],
                "schedulers": [
                    {"ConstantLR": {"learning_rate": 1.0, "total_iters": 3}},
                    {"ConstantLR": {"learning_rate": 2.0}},
                ],
            }
        },
        optimizer,
    )
    assert [group["lr"] for group in optimizer.param_groups] == [1.0, 5.0]


class FirstGroupOnly(TaggedOnly):
    """Says which groups it writes through ``group_indices``."""

    group_indices = (0,)

    def get_last_lr(self) -> list[float]:
        return [1.0]


def test_a_child_that_does_not_cover_the_wrappers_groups_is_refused():
    optimizer = _optimizer("a", "b")
    sequential = plugtrain.resolve("scheduler", "SequentialLR")
    with pytest.raises(ValueError, match=r"give param_group_tags on SequentialLR only"):
        sequential(optimizer, schedulers=[TaggedOnly(optimizer, "a")])
    child = FirstGroupOnly(optimizer, None)
    with pytest.raises(ValueError, match=r"writes param groups \[0\], but the wrapper targets"):
        sequential(optimizer, schedulers=[child])
    assert sequential(optimizer, schedulers=[child], param_group_tags="a").group_indices == [0]
    with pytest.raises(TypeError, match=r"plugtrain\.protocols\.Scheduler"):
        plugtrain.resolve("scheduler", "SequentialLR")(optimizer, schedulers=[object()])


# -- the checkpoint state rule --------------------------------------------------------------


class Opaque:
    """An object ``torch.load(weights_only=True)`` refuses."""


class KeepsAnObject(torch.optim.lr_scheduler.LRScheduler):
    """A natural torch scheduler holding a custom object in its ``__dict__``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.helper = Opaque()
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


def test_a_state_that_fails_weights_only_is_reported_at_the_first_save(tmp_path):
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path,
        model=_model,
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        schedulers=[lambda optimizer: KeepsAnObject(optimizer)],  # noqa: PLW0108 - a class has .step
        loop={"max_steps": 10},
        checkpoint={"steps": 2},
        seed=0,
    )
    data = synthetic_loader(batch_size=4, num_examples=16, in_features=4, num_classes=2)
    with pytest.raises(CheckpointError) as raised:
        trainer.fit(data)
    message = str(raised.value)
    assert trainer.global_step == 2  # the first save, not the end of the run or a resume
    assert "schedulers[0] (" in message
    assert "KeepsAnObject: it holds a " in message
    assert "Opaque object" in message
    assert "weights_only=True" in message
    assert not list(tmp_path.glob("checkpoint_*.mdl"))


# -- check ----------------------------------------------------------------------------------

NESTED = b"""\
trainer:
  init:
    model: {MLP: {in_features: 4, out_features: 2}}
    optimizer: {SGD: {lr: 0.1}}
    schedulers:
      - SequentialWD:
          schedulers:
            - ConstantLR: {learning_rate: 1.0, total_iters: 2}
            - ScalePerParamWD: {scheduler: {ConstantWD: {weight_decay: 0.1}}}
      - SequentialLR:
          schedulers:
            - StepLR: {initial_learning_rate: 1.0, step_size: 2, gamma: 0.5}
            - ConstantLR: {learning_rate: 1.0}
    loop: {max_steps: 1}
  fit:
    train_dataloader: {Synthetic: {batch_size: 4, in_features: 4, num_classes: 2}}
"""


def test_check_positions_the_children_a_wrapper_cannot_take():
    with pytest.raises(ConfigError) as raised:
        check_run(load_yaml(NESTED, "run.yaml"), plugtrain.discovery.loading.get_registry())
    found = [(issue.location, issue.path, issue.message) for issue in raised.value.issues]
    assert found == [
        (
            "run.yaml:8:15",
            "trainer.init.schedulers[0].SequentialWD.schedulers[0].ConstantLR",
            "ConstantLR schedules 'lr', but SequentialWD schedules 'weight_decay'; nest only "
            "schedulers of 'weight_decay'",
        ),
        (
            "run.yaml:9:15",
            "trainer.init.schedulers[0].SequentialWD.schedulers[1].ScalePerParamWD",
            "ScalePerParamWD can only be the outermost scheduler, not a child of SequentialWD",
        ),
        (
            "run.yaml:10:9",
            "trainer.init.schedulers[1].SequentialLR",
            "milestones are omitted but scheduler 0 has no total_iters to derive them from; "
            "give milestones",
        ),
    ]


# -- a plain torch scheduler registered as it is --------------------------------------------


@attrs.frozen
class ExponentialArgs:
    """torch's ExponentialLR, registered without any plugtrain code."""

    gamma: float = arg(help="factor per step", gt=0)


class TorchSchedulers:
    """A plugin registering torch's own class."""

    @hookimpl
    def plugtrain_register_schedulers(self, registry) -> None:
        registry.register(
            "TorchExponentialLR",
            "torch.optim.lr_scheduler:ExponentialLR",
            schema=ExponentialArgs,
        )


def test_plot_steps_a_scheduler_without_a_closed_form(register_plugin):
    register_plugin(TorchSchedulers(), name="torch_schedulers")
    specs = [
        {
            "SequentialLR": {
                "schedulers": [
                    {"ConstantLR": {"learning_rate": 0.2, "total_iters": 3}},
                    {"TorchExponentialLR": {"gamma": 0.5}},
                ]
            }
        },
        {"TorchExponentialLR": {"gamma": 0.9}},
    ]
    nested, plain = schedule_curves(specs, 7, optimizer={"SGD": {"lr": 0.4}})
    assert nested.stepped
    assert plain.stepped
    assert nested.label == "SequentialLR (stepped: no closed form)"
    assert nested.values == pytest.approx([0.2, 0.2, 0.2, 0.4, 0.2, 0.1, 0.05], rel=1e-15)
    assert plain.values == pytest.approx([0.4 * 0.9**e for e in range(7)], rel=1e-12)


# -- errors in a plugin's code --------------------------------------------------------------


def test_an_error_in_a_plugins_code_is_attributed_to_it(register_plugin):
    register_plugin(TorchSchedulers(), name="torch_schedulers")
    scheduler = plugtrain.resolve("scheduler", "SequentialLR")
    try:
        scheduler(_optimizer(...), schedulers=[{"ConstantLR": {"learning_rate": 1.0}}, 42])
    except TypeError as exc:
        error = attribute_error(exc)
    assert isinstance(error, ComponentError)
    assert str(error).startswith(
        "scheduler 'SequentialLR' from plugtrain-schedulers 0.1.0 raised TypeError: "
        "SequentialLR: scheduler 1 must be a scheduler"
    )
    assert attribute_error(ValueError("raised by nobody's plugin")) is None
    assert attribute_error(ConfigError("plugtrain's own")) is None
