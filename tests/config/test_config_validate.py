"""Validating run files: every problem at once, with its dotted path and file position."""

from __future__ import annotations

import textwrap

import pytest

from plugtrain.config import apply_overrides, check_run, load_yaml
from plugtrain.errors import ConfigError

VALID = """\
trainer:
  init:
    device: CPU
    seed: 1
    model:
      MLP: {in_features: 64, out_features: 10}
    optimizer:
      SGD:
        lr: 0.1
        momentum: 0.9
        params:
          - {params: "*bias", tag: bias_params}
    schedulers:
      - LinearLR: {initial_learning_rate: 0.1, end_learning_rate: 0.01, total_iters: 10}
    loop: {max_steps: 10}
  fit:
    train_dataloader: {Synthetic: {batch_size: 8}}
"""


def _issues(text, registry):
    with pytest.raises(ConfigError) as info:
        check_run(load_yaml(textwrap.dedent(text).encode(), "run.yaml"), registry, "run.yaml")
    return {issue.path: issue for issue in info.value.issues}


@pytest.fixture
def registry(installed_registry):
    if "SGD" not in installed_registry.names("optimizer"):
        pytest.skip("plugtrain-optimizers is not installed")
    return installed_registry


def test_a_valid_file_gives_one_plan(registry):
    (plan,) = check_run(load_yaml(VALID.encode(), "run.yaml"), registry)
    assert plan.backend_type == "CPU"
    assert plan.path == "trainer"
    assert plan.fit is not None


def test_errors_name_the_dotted_path_and_position_all_at_once(registry):
    text = VALID.replace("lr: 0.1", "lr: -0.1").replace("total_iters: 10", "total_iterz: 10")
    text = text.replace("MLP:", "MLQ:")
    issues = _issues(text, registry)
    lr = issues["trainer.init.optimizer.SGD.lr"]
    assert lr.location == "run.yaml:9:13"
    assert lr.message == "must be >= 0, got -0.1"
    typo = issues["trainer.init.schedulers[0].LinearLR.total_iterz"]
    assert "Did you mean 'total_iters'?" in typo.message
    assert "trainer.init.schedulers[0].LinearLR.total_iters" in issues  # now missing
    model = issues["trainer.init.model.MLQ"]
    assert "Did you mean 'MLP'?" in model.message
    assert model.location == "run.yaml:6:7"


def test_unknown_keys_are_errors_everywhere(registry):
    text = VALID.replace("    seed: 1\n", "    seed: 1\n    sead: 2\n")
    text = text.replace("loop: {max_steps: 10}", "loop: {max_steps: 10, max_stepz: 3}")
    issues = _issues(text, registry)
    assert "Did you mean 'seed'?" in issues["trainer.init.sead"].message
    assert "Did you mean 'max_steps'" in issues["trainer.init.loop.max_stepz"].message


def test_tag_filters_are_checked(registry):
    text = VALID.replace('{params: "*bias", tag: bias_params}', '{params: "*bias", tagg: x}')
    issues = _issues(text, registry)
    filters = "trainer.init.optimizer.SGD.params[0]"
    assert "unknown filter key 'tagg'" in issues[f"{filters}.tagg"].message
    assert "needs a tag" in issues[f"{filters}.tag"].message


def test_device_and_backend_are_mutually_exclusive(registry):
    text = VALID.replace("device: CPU", "device: CPU\n    backend: {backend_type: CPU}")
    issues = _issues(text, registry)
    assert issues["trainer.init"].message == (
        "backend and device are mutually exclusive arguments of Trainer. "
        "Please only provide one or the other"
    )


def test_trainers_of_one_file_must_share_one_backend_type(registry, register_plugin):
    import attrs

    from plugtrain import hookimpl

    @attrs.frozen
    class OtherArgs:
        """Another backend type."""

    class OtherBackend:
        @hookimpl
        def plugtrain_register_backends(self, registry):
            registry.register("OTHER", "collections:deque", schema=OtherArgs)

    from plugtrain.testing import isolated_registry

    mixed = isolated_registry(OtherBackend(), builtin=True)
    for component in registry.components():
        if component.kind != "backend" and component.plugin.name != "builtin":
            mixed.add(component)
    mixed.add(registry.lookup("backend", "CPU"))
    body = textwrap.indent(VALID.split("trainer:\n", 1)[1], "    ")
    text = "trainer:\n  - trainer:\n" + body + "  - trainer:\n" + body.replace("CPU", "OTHER")
    issues = _issues(text, mixed)
    message = issues["trainer[1].trainer.init.device"].message
    assert message == (
        "Cannot instantiate multiple backends. "
        "A backend with type CPU has already been instantiated."
    )


def test_a_fit_needs_an_optimizer_and_a_loop(registry):
    text = VALID.replace("    loop: {max_steps: 10}\n", "")
    issues = _issues(text, registry)
    assert "max_steps" in issues["trainer.init.loop"].message


def test_overrides_apply_to_every_trainer():
    data = load_yaml(b"trainer:\n  - trainer: {init: {seed: 1}}\n  - trainer: {init: {seed: 2}}\n")
    apply_overrides(data, ["trainer.init.seed=7", "trainer.init.loop.max_steps=3"])
    assert [t["trainer"]["init"]["seed"] for t in data["trainer"]] == [7, 7]
    assert data["trainer"][1]["trainer"]["init"]["loop"] == {"max_steps": 3}


def test_a_malformed_override_is_a_config_error():
    with pytest.raises(ConfigError, match=r"KEY\.PATH=VALUE"):
        apply_overrides({}, ["no-equals-sign"])


def test_a_run_file_must_be_a_mapping(registry):
    with pytest.raises(ConfigError, match="got an empty file"):
        check_run(load_yaml(b""), registry)


def test_a_cross_check_about_one_argument_is_placed_at_its_key(registry):
    text = VALID.replace(
        "    loop: {max_steps: 10}\n",
        "    loop: {max_steps: 10}\n"
        "    checkpoint:\n"
        "      steps: 5\n"
        "      checkpoint_name: last.mdl\n",
    )
    issues = _issues(text, registry)
    (issue,) = issues.values()
    assert issue.path == "trainer.init.checkpoint.checkpoint_name"
    assert issue.message == (
        "must hold '{step}' exactly once and no other '{' or '}', got 'last.mdl'"
    )
    assert issue.location == "run.yaml:18:7"  # the key, not the checkpoint section


def test_cross_checks_are_placed_at_the_first_given_argument_they_name(registry):
    text = VALID.replace(
        "        momentum: 0.9\n", "        momentum: 0.9\n        nesterov: true\n"
    )
    text = text.replace(
        "        momentum: 0.9\n", "        momentum: 0.9\n        dampening: 0.5\n"
    )
    text = text.replace(
        VALID.splitlines(keepends=True)[13],  # the LinearLR line
        "      - PiecewiseConstantWD:\n"
        "          milestones: [2]\n"
        "          vals: [0.1]\n"
        "      - OneCycleLR: {initial_learning_rate: 0.1, max_lr: 1.0, total_steps: 3}\n"
        "      - LinearLR:\n"
        "          initial_learning_rate: 0.1\n"
        "          end_learning_rate: 0.01\n"
        "          total_iters: 10\n"
        "          param_group_tags: [a, a]\n",
    )
    issues = _issues(text, registry)
    nesterov = issues["trainer.init.optimizer.SGD.nesterov"]
    assert nesterov.message.startswith("nesterov=True needs momentum > 0 and dampening = 0")
    assert nesterov.location == "run.yaml:12:9"
    # Named (weight_decays, milestones); weight_decays was written as its alias vals.
    values = issues["trainer.init.schedulers[0].PiecewiseConstantWD.vals"]
    assert values.message.startswith("weight_decays needs one more entry than milestones")
    assert values.location == "run.yaml:18:11"
    # Named (pct_start, total_steps, three_phase); pct_start is left at its default.
    phases = issues["trainer.init.schedulers[1].OneCycleLR.total_steps"]
    assert phases.message == "pct_start=0.3 with total_steps=3 leaves a phase without steps"
    assert phases.location == "run.yaml:19:63"
    tags = issues["trainer.init.schedulers[2].LinearLR.param_group_tags"]
    assert tags.message == "param_group_tags lists 'a' more than once"
    assert tags.location == "run.yaml:24:11"
    assert len(issues) == 4


def test_a_cross_check_about_the_whole_section_stays_at_the_section(registry):
    text = VALID.replace("loop: {max_steps: 10}", "loop: {eval_steps: 2}")
    issues = _issues(text, registry)
    assert issues["trainer.init.loop"].message.startswith("give at least one of max_steps")
    assert issues["trainer.init.loop"].location == "run.yaml:15:11"


def test_an_issue_about_a_blank_key_quotes_its_path_and_no_other():
    from plugtrain.errors import ConfigIssue

    assert str(ConfigIssue("  ", "unknown key")) == "'  ': unknown key"
    assert str(ConfigIssue("trainer. x", "bad")) == "'trainer. x': bad"
    assert str(ConfigIssue("AdamW param group 0.lr", "must be >= 0")) == (
        "AdamW param group 0.lr: must be >= 0"
    )
