"""Broken plugins, installed for real: each is reported with its distribution, the rest work.

Every case writes a distribution by hand (modules plus ``*.dist-info`` with ``METADATA`` and
``entry_points.txt``) into a folder put on ``PYTHONPATH`` of a subprocess, so plugtrain finds it
through ``importlib.metadata`` exactly as it finds a pip-installed plugin. Without strict mode the
broken plugin is reported once on stderr and skipped; with ``PLUGTRAIN_STRICT_PLUGINS=1`` it is
an error (exit 1, no traceback).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
from support.reliability import HANG_GUARD_S, Outcome, run_subprocess, subprocess_env, write_dist

pytestmark = pytest.mark.slow

SCHEMAS = '''\
import attrs
from plugtrain.schema import arg


@attrs.frozen
class LrArgs:
    """Takes a learning rate."""

    lr: float = arg(help="learning rate", gt=0)


@attrs.frozen
class DisagreeingArgs:
    """Its schema names beta; its constructor takes gamma."""

    lr: float = arg(help="learning rate", gt=0)
    beta: float = arg(0.5, help="not what the constructor takes")
'''

IMPLEMENTATION = """\
import torch


class Disagreeing(torch.optim.SGD):
    def __init__(self, params, lr, gamma=0.5):
        super().__init__(params, lr=lr)
"""


def _plugin(body: str) -> str:
    return "from plugtrain import hookimpl\nimport acme_schemas\n\n\n" + textwrap.dedent(body)


@attrs.frozen
class Case:
    """One broken distribution: its modules, entry points, and what the report must say."""

    distribution: str
    entry_point: str
    modules: dict[str, str]
    reported: str


CASES = {
    "import_error": Case(
        "acme-import-error",
        "acme_import_error",
        {"acme_import_error": "raise ImportError('needs libfoo, which is not installed')\n"},
        "ImportError: needs libfoo, which is not installed",
    ),
    "missing_module": Case(
        "acme-missing-module",
        "acme_not_there",
        {},
        "ModuleNotFoundError: No module named 'acme_not_there'",
    ),
    "hook_raises": Case(
        "acme-hook-raises",
        "acme_hook_raises",
        {
            "acme_hook_raises": _plugin("""
                @hookimpl
                def plugtrain_register_optimizers(registry):
                    registry.register("Half", "acme_x:Half", schema=acme_schemas.LrArgs)
                    raise RuntimeError("registry exploded")
            """)
        },
        "in hook plugtrain_register_optimizers: RuntimeError: registry exploded",
    ),
    "hook_returns_garbage": Case(
        "acme-hook-garbage",
        "acme_hook_garbage",
        {
            "acme_hook_garbage": _plugin("""
                @hookimpl
                def plugtrain_register_schedulers(registry):
                    return ["LinearLR", 42]
            """)
        },
        "hook plugtrain_register_schedulers returned ['LinearLR', 42]",
    ),
    "bad_registration": Case(
        "acme-bad-registration",
        "acme_bad_registration",
        {
            "acme_bad_registration": _plugin("""
                @hookimpl
                def plugtrain_register_optimizers(registry):
                    registry.register("Bad", "no colon here", schema=acme_schemas.LrArgs)
            """)
        },
        "target must look like 'package.module:attribute', got 'no colon here'",
    ),
    "misspelt_hook": Case(
        "acme-misspelt-hook",
        "acme_misspelt_hook",
        {
            "acme_misspelt_hook": _plugin("""
                @hookimpl
                def plugtrain_register_optimisers(registry):
                    pass
            """)
        },
        "implements unknown hook 'plugtrain_register_optimisers'",
    ),
}

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 1
    model: {{MLP: {{in_features: 64, hidden: 8, out_features: 10}}}}
    optimizer: {{{optimizer}: {{lr: 0.1}}}}
    loop: {{max_steps: 2}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 8}}}}
"""


def _site(tmp_path: Path, *cases: Case) -> dict[str, str]:
    site = tmp_path / "site"
    write_dist(site, "acme-schemas", {"acme_schemas": SCHEMAS}, [])
    for case in cases:
        name = case.distribution.replace("-", "_")
        write_dist(site, case.distribution, case.modules, [(name, case.entry_point)])
    return subprocess_env(PYTHONPATH=os.pathsep.join([str(site), *sys.path]))


def _run_file(tmp_path: Path, optimizer: str = "SGD") -> Path:
    path = tmp_path / f"run-{optimizer.replace(':', '-')}.yaml"
    path.write_text(RUN.format(model_dir=tmp_path / "model", optimizer=optimizer))
    return path


def _strict(env: dict[str, str]) -> dict[str, str]:
    return {**env, "PLUGTRAIN_STRICT_PLUGINS": "1"}


def _assert_reported(outcome: Outcome, case: Case) -> None:
    """Reported once on stderr with distribution and version; skipped, not fatal."""
    name = case.distribution.replace("-", "_")
    line = f"plugtrain: plugin '{name}' from {case.distribution} 1.0 failed and was skipped: "
    assert outcome.err.count(line) == 1, outcome.err
    assert case.reported in outcome.err
    assert "PLUGTRAIN_STRICT_PLUGINS=1" in outcome.err
    assert "Traceback" not in outcome.err


def _assert_strict_error(outcome: Outcome, case: Case) -> None:
    name = case.distribution.replace("-", "_")
    assert outcome.status == 1, outcome
    expected = f"plugtrain: error: plugin '{name}' from {case.distribution} 1.0 failed: "
    assert outcome.err.startswith(expected), outcome.err
    assert case.reported in outcome.err
    assert "Traceback" not in outcome.err


def test_p01_broken_plugins_are_skipped_and_reported_with_their_distribution(tmp_path):
    env = _site(tmp_path, *CASES.values())
    run = _run_file(tmp_path)

    checked = run_subprocess("check", str(run), env=env)
    assert checked.status == 0, checked
    assert f"{run}: OK" in checked.out
    for broken in CASES.values():
        _assert_reported(checked, broken)

    listed = run_subprocess("plugins", "--json", env=env)
    assert listed.status == 0, listed
    rows = {row["name"]: row for row in json.loads(listed.out)}
    for broken in CASES.values():
        row = rows[broken.distribution.replace("-", "_")]
        found = (row["distribution"], row["version"], row["status"])
        assert found == (broken.distribution, "1.0", "failed")
        assert broken.reported in row["error"]
    assert "SGD" in rows["optimizers"]["components"]["optimizer"]
    assert rows["optimizers"]["status"] == "loaded"


@pytest.mark.parametrize("case", sorted(CASES))
def test_p01_strict_mode_makes_each_broken_plugin_an_error(case, tmp_path):
    broken = CASES[case]
    outcome = run_subprocess(
        "check", str(_run_file(tmp_path)), env=_strict(_site(tmp_path, broken))
    )
    _assert_strict_error(outcome, broken)


def test_p01_a_failed_plugin_is_named_when_its_component_is_missing(tmp_path):
    broken = CASES["hook_raises"]
    env = _site(tmp_path, broken)
    outcome = run_subprocess("check", str(_run_file(tmp_path, "Half")), env=env)
    assert outcome.status == 2
    assert "Unknown optimizer 'Half'" in outcome.err
    assert "Plugins that failed to load: acme_hook_raises." in outcome.err


WRONG_TARGET = Case(
    "acme-wrong-target",
    "acme_wrong_target",
    {
        "acme_wrong_target": _plugin("""
            @hookimpl
            def plugtrain_register_optimizers(registry):
                registry.register(
                    "NoModule", "acme_wrong_target_impl:Opt", schema=acme_schemas.LrArgs
                )
                registry.register("NoClass", "acme_wrong_target:Opt", schema=acme_schemas.LrArgs)
        """)
    },
    "",
)


def test_p02_a_component_whose_import_string_is_wrong_fails_at_use_naming_the_distribution(
    tmp_path,
):
    env = _site(tmp_path, WRONG_TARGET)
    no_module, no_class = _run_file(tmp_path, "NoModule"), _run_file(tmp_path, "NoClass")
    assert run_subprocess("check", str(no_module), env=env).status == 0  # lazy: nothing imported
    for run, environment, why in (
        (no_module, env, "ModuleNotFoundError: No module named 'acme_wrong_target_impl'"),
        (no_class, _strict(env), "AttributeError: module 'acme_wrong_target' has no attribute"),
    ):
        outcome = run_subprocess("fit", str(run), env=environment)
        assert outcome.status == 1, outcome
        assert "Traceback" not in outcome.err
        name = run.stem.removeprefix("run-")
        expected = f"plugtrain: error: optimizer {name!r} from acme-wrong-target 1.0 cannot be "
        assert expected in outcome.err
        assert why in outcome.err
    assert not (tmp_path / "model").exists()
    others = run_subprocess("check", str(_run_file(tmp_path)), env=_strict(env))
    assert others.status == 0, others


def _contract(env: dict[str, str], distribution: str) -> list[str]:
    script = (
        "import json, sys\n"
        "from plugtrain.testing import check_plugin_contract\n"
        f"print(json.dumps(check_plugin_contract({distribution!r}, torch_free=False)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD_S,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_p02_the_plugin_contract_check_reports_wrong_import_strings(tmp_path):
    problems = _contract(_site(tmp_path, WRONG_TARGET), "acme-wrong-target")
    assert len(problems) == 2
    assert all("from acme-wrong-target 1.0 cannot be imported" in p for p in problems)


DISAGREEING = Case(
    "acme-disagreeing",
    "acme_disagreeing",
    {
        "acme_disagreeing": _plugin("""
            @hookimpl
            def plugtrain_register_optimizers(registry):
                registry.register(
                    "Disagreeing", "acme_impl:Disagreeing", schema=acme_schemas.DisagreeingArgs
                )
        """),
        "acme_impl": IMPLEMENTATION,
    },
    "",
)


def test_p03_a_schema_that_disagrees_with_the_constructor_is_caught_by_the_contract_check(
    tmp_path,
):
    problems = _contract(_site(tmp_path, DISAGREEING), "acme-disagreeing")
    assert problems == [
        "optimizer 'Disagreeing' (acme_impl:Disagreeing): parameter 'gamma' is missing from the "
        "schema",
        "optimizer 'Disagreeing' (acme_impl:Disagreeing): schema argument 'beta' is not a "
        "parameter of the constructor",
    ]


@pytest.fixture(scope="module")
def disagreeing_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Outcome, Outcome]:
    """``check`` and ``fit`` of a run passing ``beta``, which the schema accepts."""
    tmp_path = tmp_path_factory.mktemp("disagreeing")
    env = _site(tmp_path, DISAGREEING)
    run = _run_file(tmp_path, "Disagreeing")
    run.write_text(run.read_text().replace("{lr: 0.1}", "{lr: 0.1, beta: 0.9}"))
    return run_subprocess("check", str(run), env=env), run_subprocess("fit", str(run), env=env)


def test_p03_a_disagreeing_schema_fails_at_build_time_without_a_traceback(disagreeing_fit):
    checked, fitted = disagreeing_fit
    assert checked.status == 0, checked  # the schema accepts beta
    assert fitted.status == 1, fitted
    assert "Traceback" not in fitted.err
    assert "unexpected keyword argument 'beta'" in fitted.err


def test_p03_a_disagreeing_schema_at_build_time_names_the_distribution(disagreeing_fit):
    assert "acme-disagreeing" in disagreeing_fit[1].err


def _twin(distribution: str) -> Case:
    module = distribution.replace("-", "_")
    return Case(
        distribution,
        module,
        {
            module: _plugin("""
                @hookimpl
                def plugtrain_register_optimizers(registry):
                    registry.register("Twin", "torch.optim:SGD", schema=acme_schemas.LrArgs)
            """)
        },
        "",
    )


def test_p04_two_plugins_with_one_name_are_an_error_naming_both_until_one_is_chosen(tmp_path):
    env = _site(tmp_path, _twin("acme-twin-a"), _twin("acme-twin-b"))
    ambiguous = _run_file(tmp_path, "Twin")
    for environment in (env, _strict(env)):
        outcome = run_subprocess("check", str(ambiguous), env=environment)
        assert outcome.status == 2, outcome
        prefix = f"{ambiguous}:7:17: trainer.init.optimizer.Twin: optimizer 'Twin' is provided by 2"
        assert prefix in outcome.err
        assert "'acme-twin-a:Twin' (acme-twin-a 1.0)" in outcome.err
        assert "'acme-twin-b:Twin' (acme-twin-b 1.0)" in outcome.err
        assert "-p no:acme_twin_a / -p no:acme_twin_b" in outcome.err
    chosen = run_subprocess("check", str(_run_file(tmp_path, "acme-twin-b:Twin")), env=env)
    assert chosen.status == 0, chosen
    blocked = run_subprocess("-p", "no:acme_twin_a", "check", str(ambiguous), env=env)
    assert blocked.status == 0, blocked
    others = run_subprocess("check", str(_run_file(tmp_path)), env=_strict(env))
    assert others.status == 0, others
