"""``trainer.init.sparsity`` in run files: every form, every config error with its position.

Real YAML files checked through ``plugtrain check`` (in process, and as a real process for a
few), and the Python API ``plan_sparsity``. Torch is never imported by any of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.paths import DATA

from plugtrain.cli import main
from plugtrain.config import load_run_file, plan_run
from plugtrain.config.plan import SparsityGroupSpec
from plugtrain.config.validation.validate import plan_sparsity
from plugtrain.errors import ConfigError
from plugtrain.hyperparams import LinearHyperParameter
from plugtrain.registry import Registry

HEAD = """\
trainer:
  init:
    device: CPU
    model:
      MLP: {in_features: 64, out_features: 10}
    optimizer:
      SGD: {lr: 0.1}
    loop: {max_steps: 10}
"""
TAIL = """\
  fit:
    train_dataloader: {Synthetic: {batch_size: 8}}
"""


@pytest.fixture
def registry(installed_registry: Registry) -> Registry:
    if "RigL" not in installed_registry.names("sparsity"):
        pytest.skip("plugtrain-sparsity is not installed")
    return installed_registry


def _write(tmp_path: Path, sparsity: str, *, head: str = HEAD, top: str = "") -> Path:
    """A run file whose ``trainer.init.sparsity`` is ``sparsity`` (YAML, indented 4)."""
    body = textwrap.indent(textwrap.dedent(sparsity), "    ") if sparsity else ""
    path = tmp_path / "run.yaml"
    path.write_text(top + head + body + TAIL, encoding="utf-8")
    return path


def _plan(path: Path, registry: Registry) -> Any:
    (trainer,) = plan_run(load_run_file(path), registry, str(path)).trainers
    return trainer


def _check(
    path: Path, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, list[str], str]:
    """``plugtrain check``: its status, the lines it wrote to stderr, its output."""
    status = main([*options, "check", str(path)])
    captured = capsys.readouterr()
    lines = [line.strip() for line in captured.err.splitlines()]
    return status, lines, captured.out


def _one_error(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    status, lines, _ = _check(path, capsys, *options)
    assert status == 2, lines
    skipped = ("plugtrain: warning", "- ")  # warnings, and the bullets of a long message
    errors = [line for line in lines if not line.startswith(skipped)]
    assert len(errors) == 1, lines
    return errors[0].removeprefix("plugtrain: error: ")


# -- the forms of spec 1.1 -----------------------------------------------------------------------


def test_no_section_and_null_mean_no_sparsity(tmp_path: Path, registry: Registry) -> None:
    assert _plan(_write(tmp_path, ""), registry).sparsity == ()
    assert _plan(_write(tmp_path, "sparsity: null\n"), registry).sparsity == ()


def test_a_float_is_one_static_group_with_the_default_filter(
    tmp_path: Path, registry: Registry
) -> None:
    path = _write(tmp_path, "sparsity: 0.75\n")
    (group,) = _plan(path, registry).sparsity
    assert group == SparsityGroupSpec("Static", {"sparsity": 0.75}, None, "trainer.init.sparsity")
    assert group.location == f"{path}:9:15"


def test_a_mapping_is_one_group_and_the_algorithm_matches_any_case(
    tmp_path: Path, registry: Registry
) -> None:
    path = _write(
        tmp_path,
        """\
        sparsity:
          algorithm: RIGL
          schedule: 0.5
          param_filter: "*.weight"
          balance_out_groups: 2
        """,
    )
    (group,) = _plan(path, registry).sparsity
    assert group.algorithm == "RigL"
    assert dict(group.arguments) == {"sparsity": 0.5, "balance_out_groups": 2}
    assert group.param_filter == ("*.weight",)
    assert group.location == f"{path}:10:7"


def test_a_list_is_one_group_per_entry_in_order(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        """\
        sparsity:
          - algorithm: gmp
            sparsity: {type: exp, init: 0.0, gamma: -0.01}
            update: {freq: 10}
            param_filter: ["fc1.*", "fc2.*"]
          - sparsity: 0.5
            init_method: checkerboard
          - algorithm: Set
            sparsity: [0.5, 0.6]
        """,
    )
    groups = _plan(path, registry).sparsity
    assert [g.algorithm for g in groups] == ["GMP", "Static", "SET"]
    assert main(["check", str(path)]) == 0
    assert "trainer: backend CPU; fit; sparsity GMP, Static, SET\n" in capsys.readouterr().out
    assert [g.path for g in groups] == [f"trainer.init.sparsity[{i}]" for i in range(3)]
    assert groups[0].param_filter == ("fc1.*", "fc2.*")
    assert groups[0].arguments["sparsity"] == {"type": "exp", "init": 0.0, "gamma": -0.01}
    assert groups[1].param_filter is None
    assert groups[2].arguments["sparsity"] == [0.5, 0.6]
    assert groups[1].location == f"{path}:14:9"


def test_the_cstorch_groups_shape_merges_params_up(tmp_path: Path, registry: Registry) -> None:
    path = _write(
        tmp_path,
        """\
        sparsity:
          groups:
            - algorithm: rigl
              param_filter: "*.weight"
              params: {sparsity: 0.8, drop_fraction: 0.1}
            - params: {sparsity: 0.3}
        """,
    )
    first, second = _plan(path, registry).sparsity
    assert first.algorithm == "RigL"
    assert dict(first.arguments) == {"sparsity": 0.8, "drop_fraction": 0.1}
    assert first.path == "trainer.init.sparsity.groups[0]"
    assert (second.algorithm, dict(second.arguments)) == ("Static", {"sparsity": 0.3})


def test_a_mapping_of_groups_is_one_group(tmp_path: Path, registry: Registry) -> None:
    path = _write(tmp_path, "sparsity:\n  groups: {params: {sparsity: 0.4}}\n")
    (group,) = _plan(path, registry).sparsity
    assert dict(group.arguments) == {"sparsity": 0.4}


def test_a_null_level_drops_its_group_with_a_warning(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "sparsity:\n  - sparsity: null\n  - sparsity: 0.5\n")
    (group,) = _plan(path, registry).sparsity
    assert group.path == "trainer.init.sparsity[1]"
    status, lines, _ = _check(path, capsys)
    assert status == 0
    assert (
        f"plugtrain: warning: {path}:10:9: trainer.init.sparsity[0].sparsity: sparsity is "
        "null: this group sparsifies nothing and is left out"
    ) in lines


def test_type_is_the_deprecated_algorithm_with_a_warning(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "sparsity: {type: gmp, sparsity: [0.1, 0.2]}\n")
    (group,) = _plan(path, registry).sparsity
    assert group.algorithm == "GMP"
    status, lines, _ = _check(path, capsys)
    assert status == 0
    expected = "The 'type' key is deprecated, please use 'algorithm' instead"
    assert f"plugtrain: warning: {path}:9:16: trainer.init.sparsity.type: {expected}" in lines


def test_legacy_top_level_sparsity_with_add_summaries_switches_on_log_sparsity(
    tmp_path: Path, registry: Registry
) -> None:
    top = "sparsity:\n  add_summaries: true\n  algorithm: set\n  sparsity: 0.6\n"
    path = _write(tmp_path, "", top=top)
    plan = _plan(path, registry)
    (group,) = plan.sparsity
    assert (group.algorithm, dict(group.arguments)) == ("SET", {"sparsity": 0.6})
    assert group.path == "sparsity"
    assert [c.name for c in plan.callbacks] == ["LogSparsity"]
    assert plan.callbacks[0].location == f"{path}:2:18"


def test_legacy_add_summaries_false_adds_no_callback(tmp_path: Path, registry: Registry) -> None:
    top = "sparsity:\n  - {sparsity: 0.6, add_summaries: false}\n"
    plan = _plan(_write(tmp_path, "", top=top), registry)
    assert plan.callbacks == ()
    assert len(plan.sparsity) == 1


def test_a_third_party_algorithm_resolves_the_same_way(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    """A local plugin module (``plugins:``) registering an algorithm with the shared schema base."""
    (tmp_path / "acme_prune.py").write_text(
        textwrap.dedent(
            '''\
            from typing import Any, ClassVar

            import attrs

            import plugtrain
            from plugtrain.sparsity_schema import SparsitySchema, sparsity_arg, update_arg


            @attrs.frozen
            class PruneArgs(SparsitySchema):
                """Prune, never regrow."""

                sparsity: Any = sparsity_arg()
                update: Any = update_arg()
                update_argument: ClassVar[str | None] = "update"


            @plugtrain.hookimpl
            def plugtrain_register_sparsity(registry):
                registry.register("AcmePrune", "acme_prune:AcmePrune", schema=PruneArgs)
            '''
        )
    )
    sparsity = "sparsity: {algorithm: acmeprune, sparsity: [0.1, 0.2], update: {freq: 0}}\n"
    path = _write(tmp_path, sparsity)
    sys.path.insert(0, str(tmp_path))
    try:
        message = _one_error(path, capsys, "-p", "acme_prune")
        fixed = path.read_text().replace("freq: 0", "freq: 5")
        path.write_text(fixed)
        status, _, out = _check(path, capsys, "-p", "acme_prune")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("acme_prune", None)
    assert message == (
        f"{path}:9:75: trainer.init.sparsity.update.freq: update freq must be >= 1, got 0"
    )
    assert status == 0
    assert "OK (1 trainer)" in out


# -- the config errors of spec 1.3, with positions -----------------------------------------------

ERRORS = [
    pytest.param(
        "sparsity: {sparsity: 0.5, schedule: 0.5}\n",
        "9:31: trainer.init.sparsity.schedule: Cannot specify both 'sparsity' and 'schedule' in "
        "the same config",
        id="both-sparsity-and-schedule",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, param_filter: {fc1: 1}}\n",
        "9:45: trainer.init.sparsity.param_filter: filter must be a string or list of strings, "
        "got LocatedDict",
        id="param-filter-type",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, param_filter: ['*.weight', 3]}\n",
        "9:58: trainer.init.sparsity.param_filter[1]: each glob is a non-empty string, got int 3",
        id="param-filter-item",
    ),
    pytest.param(
        "sparsity: {algorithm: group, sparsity: 0.5}\n",
        "9:27: trainer.init.sparsity.algorithm: Unsupported sparsity algorithm: 'group'. "
        "Supported algorithms (any case): GMP, RigL, SET, Static.",
        id="unknown-algorithm",
    ),
    pytest.param(
        "sparsity: {algorithm: rigle, sparsity: 0.5}\n",
        "9:27: trainer.init.sparsity.algorithm: Unsupported sparsity algorithm: 'rigle'. Did you "
        "mean 'RigL'? Supported algorithms (any case): GMP, RigL, SET, Static.",
        id="misspelt-algorithm",
    ),
    pytest.param(
        "sparsity: {sparsity: [0.5, 0.6]}\n",
        "9:16: trainer.init.sparsity.sparsity: Static sparsity algorithm only supports constant "
        "sparsity (a number in [0, 1)), got [0.5, 0.6]; for a schedule use algorithm gmp, set "
        "or rigl",
        id="static-not-constant",
    ),
    pytest.param(
        "sparsity: {sparsity: 1.0}\n",
        "9:16: trainer.init.sparsity.sparsity: Invalid sparsity level 1.0. Must be 0.0 <= s < 1.0",
        id="static-out-of-range",
    ),
    pytest.param(
        "sparsity:\n  - {sparsity: 0.5}\n  - {algorithm: gmp, sparsity: 0.7}\n",
        "11:26: trainer.init.sparsity[1].sparsity: Configured with constant sparsity 0.7. This "
        "is not valid, because the sparsity pattern would not change during training. For a "
        'static sparsity pattern, use `algorithm="static".`',
        id="gmp-constant",
    ),
    pytest.param(
        "sparsity: {algorithm: set, sparsity: {init: 0.5, slope: 0.1}}\n",
        "9:32: trainer.init.sparsity.sparsity: Must specify `type`",
        id="schedule-without-type",
    ),
    pytest.param(
        "sparsity: {algorithm: set, sparsity: {type: step, init: 0.5}}\n",
        "9:49: trainer.init.sparsity.sparsity.type: Unknown schedule type 'step'. Valid types: "
        "constant, cosine, cycling, exp, linear, power (there is no 'step' type)",
        id="unknown-schedule-type",
    ),
    pytest.param(
        "sparsity: {algorithm: set, sparsity: {type: linear, init: 0.5, slope: 0.1, gamma: 2}}\n",
        "9:80: trainer.init.sparsity.sparsity.gamma: linear schedule got an unexpected argument "
        "'gamma'; its arguments are: init, slope",
        id="schedule-unknown-argument",
    ),
    pytest.param(
        "sparsity: {algorithm: set, sparsity: 0.5, drop_fraction: {type: cosine, init: 0.3}}\n",
        "9:47: trainer.init.sparsity.drop_fraction: cosine schedule needs 'half_period' (it "
        "needs: init, half_period)",
        id="schedule-missing-argument",
    ),
    pytest.param(
        "sparsity: {algorithm: set, sparsity: fast}\n",
        "9:42: trainer.init.sparsity.sparsity: must be of type float | list[float] | "
        "dict[str, Any] | HyperParameterSchedule | Callable[[int], float], got str 'fast'",
        id="schedule-of-another-type",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, init_method: top_k}\n",
        '9:31: trainer.init.sparsity.init_method: Unknown `init_method`: "top_k". Valid options '
        "are one of the built-in ['random', 'topk', 'from_zeros', 'checkerboard'] or a function "
        "with signature (param, sparsity, score_shaper=None, device=None) -> bool tensor.",
        id="unknown-init-method",
    ),
    pytest.param(
        "sparsity: {algorithm: rigl, sparsity: 0.5, update: {start: 10}}\n",
        "9:48: trainer.init.sparsity.update: Invalid `update`: {'start': 10}. Valid options are:",
        id="update-without-freq-or-steps",
    ),
    pytest.param(
        "sparsity: {algorithm: rigl, sparsity: 0.5, update: {freq: 10, stopp: 20}}\n",
        "9:67: trainer.init.sparsity.update.stopp: update got an unexpected key 'stopp'; with "
        "`freq` the keys are: freq, start, stop",
        id="update-unknown-key",
    ),
    pytest.param(
        "sparsity: {algorithm: rigl, sparsity: 0.5, balance_in_groups: 2, balance_out_groups: 4}\n",
        "9:70: trainer.init.sparsity.balance_out_groups: Only one of `balance_in_groups` and "
        "`balance_out_groups` can be specified at a time.",
        id="rigl-both-balance-keys",
    ),
    pytest.param(
        "sparsity: 1\n",
        "9:15: trainer.init.sparsity: Expected sparsity to be a float, dict, or list of dicts. "
        "Got: int 1 (an int is not a level: write 1.0 for one Static group at that level, or "
        "leave sparsity out to train dense)",
        id="int-sparsity",
    ),
    pytest.param(
        "sparsity: dense\n",
        "9:15: trainer.init.sparsity: Expected sparsity to be a float, dict, or list of dicts. "
        "Got: str 'dense'",
        id="str-sparsity",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, update: {freq: 2}}\n",
        "9:31: trainer.init.sparsity.update: unknown argument 'update'.",
        id="update-on-static",
    ),
    pytest.param(
        "sparsity: {algorithm: gmp, sparsity: [0.1], drop_fraction: 0.2}\n",
        "9:49: trainer.init.sparsity.drop_fraction: unknown argument 'drop_fraction'.",
        id="drop-fraction-on-gmp",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, add_summaries: true}\n",
        "9:31: trainer.init.sparsity.add_summaries: add_summaries is Model Zoo's legacy switch "
        "(a top-level sparsity:); in trainer.init write callbacks: [LogSparsity: {}] to log "
        "sparsity",
        id="add-summaries-in-v2",
    ),
    pytest.param(
        "sparsity: {type: rigl, algorithm: set, sparsity: 0.5}\n",
        "9:16: trainer.init.sparsity.type: 'type' is the deprecated spelling of 'algorithm'; "
        "give only 'algorithm' (here algorithm: 'set', type: 'rigl')",
        id="type-and-algorithm",
    ),
    pytest.param(
        "sparsity: []\n",
        "9:15: trainer.init.sparsity: an empty list has no sparsity groups; leave sparsity out "
        "(or write null) to train dense",
        id="empty-list",
    ),
    pytest.param(
        "sparsity: [0.5]\n",
        "9:16: trainer.init.sparsity[0]: each sparsity group is a mapping, got float 0.5",
        id="list-of-floats",
    ),
    pytest.param(
        "sparsity: {groups: [{params: {sparsity: 0.5}}], extra: 1}\n",
        "9:53: trainer.init.sparsity.extra: unknown key 'extra' beside 'groups'",
        id="groups-with-other-key",
    ),
    pytest.param(
        "sparsity: {groups: [{sparsity: 0.5, params: {sparsity: 0.6}}]}\n",
        "9:50: trainer.init.sparsity.groups[0].params.sparsity: 'sparsity' is written both in "
        "the group and in its params; give it once",
        id="groups-key-twice",
    ),
    pytest.param(
        "sparsity: {sparsity: 0.5, init_methd: topk}\n",
        "9:31: trainer.init.sparsity.init_methd: unknown argument 'init_methd'. Did you mean "
        "'init_method'?",
        id="misspelt-key",
    ),
]


@pytest.mark.parametrize(("sparsity", "expected"), ERRORS)
def test_a_config_error_is_reported_with_its_position(
    sparsity: str,
    expected: str,
    tmp_path: Path,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _write(tmp_path, sparsity)
    message = _one_error(path, capsys)
    assert message.startswith(f"{path}:{expected}"), message


def test_legacy_and_trainer_sparsity_together_is_an_error(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "sparsity: 0.5\n", top="sparsity: 0.4\n")
    message = _one_error(path, capsys)
    assert message == (
        f"{path}:1:1: sparsity: sparsity is written both at the top level (legacy) and in "
        "trainer.init; keep only trainer.init.sparsity"
    )


def test_every_problem_of_several_groups_at_once(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    sparsity = """\
    sparsity:
      - {algorithm: rigl, sparsity: 0.5, update: {freq: 0}}
      - {algorithm: gmp, sparsity: 0.5}
      - {sparsity: 2.0}
    """
    status, lines, _ = _check(_write(tmp_path, sparsity), capsys)
    assert status == 2
    assert lines[0] == "plugtrain: error: 3 problems in the configuration:"
    paths = [line.split(": ")[1] for line in lines[1:]]
    assert paths == [
        "trainer.init.sparsity[0].update.freq",
        "trainer.init.sparsity[1].sparsity",
        "trainer.init.sparsity[2].sparsity",
    ]


def test_a_bad_filter_and_bad_arguments_of_one_group_are_reported_together(
    tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    sparsity = "sparsity: {algorithm: set, sparsity: 1.5, param_filter: 7, update: {freq: 0}}\n"
    status, lines, _ = _check(_write(tmp_path, sparsity), capsys)
    assert status == 2
    assert lines[0] == "plugtrain: error: 3 problems in the configuration:"
    paths = sorted(line.split(": ")[1] for line in lines[1:])
    assert paths == [
        "trainer.init.sparsity.param_filter",
        "trainer.init.sparsity.sparsity",
        "trainer.init.sparsity.update.freq",
    ]


# -- a real process ----------------------------------------------------------------------------


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['plugtrain', *{list(args)!r}]\n"
        "try:\n"
        "    runpy.run_module('plugtrain', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "else:\n"
        "    code = 0\n"
        "torch = any(m.split('.')[0] == 'torch' for m in sys.modules)\n"
        "print('TORCH-IMPORTED' if torch else 'TORCH-FREE')\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        check=False,
        timeout=300,
    )


def test_check_of_a_model_zoo_rigl_file_in_a_real_process_never_imports_torch(
    tmp_path: Path, registry: Registry
) -> None:
    corpus = DATA / "modelzoo" / "gpt3_125m_rigl75.yaml"
    done = _cli("check", str(corpus), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "TORCH-FREE"
    assert f"{corpus}: OK (1 trainer)" in done.stdout
    assert "trainer: backend CSX; fit, validate, validate_all; sparsity RigL\n" in done.stdout


@pytest.mark.parametrize(
    ("sparsity", "expected"),
    [
        (
            "sparsity: 0\n",
            "9:15: trainer.init.sparsity: Expected sparsity to be a float, dict, or list of "
            "dicts. Got: int 0 (an int is not a level: write 0.0",
        ),
        (
            "sparsity: {algorithm: GMP, sparsity: 0.9}\n",
            "9:32: trainer.init.sparsity.sparsity: Configured with constant sparsity 0.9.",
        ),
        (
            "sparsity: {algorithm: rigl, sparsity: 0.5, update: {steps: [10], freq: 5}}\n",
            "9:70: trainer.init.sparsity.update.freq: update with `steps` takes no other key",
        ),
    ],
    ids=["int", "gmp-constant", "steps-and-freq"],
)
def test_config_errors_in_a_real_process(
    sparsity: str, expected: str, tmp_path: Path, registry: Registry
) -> None:
    path = _write(tmp_path, sparsity)
    done = _cli("check", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"plugtrain: error: {path}:{expected}"), done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == "TORCH-FREE"


def test_a_bad_sparsity_section_in_a_real_process(tmp_path: Path, registry: Registry) -> None:
    sparsity = """\
    sparsity:
      algorithm: rigl
      sparsity: 0.75
      drop_fraction: {type: cosine, init: 0.3, half_period: 3584, minimun: 0}
      update: {freq: 100, stop: 3584}
    """
    path = _write(tmp_path, sparsity)
    done = _cli("check", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"plugtrain: error: {path}:12:67: trainer.init.sparsity.drop_fraction.minimun: cosine "
        "schedule got an unexpected argument 'minimun'; its arguments are: init, half_period, "
        "minimum"
    )
    assert done.stdout.splitlines()[-1] == "TORCH-FREE"


# -- the Python API ------------------------------------------------------------------------------


def test_plan_sparsity_takes_the_run_file_forms(registry: Registry) -> None:
    assert plan_sparsity(registry, None) == ()
    (group,) = plan_sparsity(registry, 0.5)
    assert (group.algorithm, dict(group.arguments), group.path) == (
        "Static",
        {"sparsity": 0.5},
        "sparsity",
    )
    groups = plan_sparsity(
        registry,
        [
            {"algorithm": "rigl", "schedule": 0.9, "param_filter": ["*.weight"]},
            {"sparsity": 0.2},
        ],
    )
    assert [g.algorithm for g in groups] == ["RigL", "Static"]
    assert groups[0].arguments == {"sparsity": 0.9}
    assert groups[0].path == "sparsity[0]"
    (merged,) = plan_sparsity(registry, {"groups": [{"params": {"sparsity": 0.2}}]})
    assert (merged.algorithm, merged.path) == ("Static", "sparsity.groups[0]")


def test_plan_sparsity_takes_python_callables_and_schedules(registry: Registry) -> None:
    def keep(name: str, param: Any) -> bool:
        return name.endswith("weight")

    def init(param: Any, sparsity: Any, score_shaper: Any = None, device: Any = None) -> Any:
        return param

    schedule = LinearHyperParameter(0.0, 0.01)
    (group,) = plan_sparsity(
        registry,
        {
            "algorithm": "gmp",
            "sparsity": schedule,
            "init_method": init,
            "param_filter": keep,
            "update": lambda step: step % 3 == 0,
        },
    )
    assert group.param_filter is keep
    assert group.arguments["sparsity"] is schedule
    assert group.call_arguments()["init_method"] is init
    (lam,) = plan_sparsity(registry, {"algorithm": "set", "sparsity": lambda step: 0.5})
    assert lam.arguments["sparsity"](3) == 0.5


def test_plan_sparsity_raises_the_same_errors(registry: Registry) -> None:
    with pytest.raises(ConfigError) as info:
        plan_sparsity(registry, {"algorithm": "gmp", "sparsity": 0.5, "schedule": 0.4})
    assert str(info.value) == (
        "sparsity.schedule: Cannot specify both 'sparsity' and 'schedule' in the same config"
    )
    with pytest.raises(ConfigError) as info:
        plan_sparsity(registry, 0)
    assert str(info.value).startswith(
        "sparsity: Expected sparsity to be a float, dict, or list of dicts. Got: int 0"
    )
    with pytest.raises(ConfigError, match=r"sparsity\[1\]\.update: Invalid `update`"):
        plan_sparsity(
            registry, [{"sparsity": 0.1}, {"algorithm": "set", "sparsity": 0.1, "update": {}}]
        )
    with pytest.raises(ConfigError, match=r"sparsity\.update: must be of type dict"):
        plan_sparsity(registry, {"algorithm": "set", "sparsity": 0.1, "update": 5})


def test_plan_sparsity_warns_for_the_deprecated_type(registry: Registry) -> None:
    with pytest.warns(UserWarning, match="The 'type' key is deprecated"):
        (group,) = plan_sparsity(registry, {"type": "static", "sparsity": 0.3})
    assert group.algorithm == "Static"
