"""The command line: listing commands, error output, and that listing never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from plugtrain.cli import main


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "plugtrain", *args],
        capture_output=True,
        text=True,
        env=full_env,
        check=False,
        timeout=120,
    )


TORCH_PROBE = """
import sys, runpy
sys.argv = ["plugtrain", *{args!r}]
try:
    runpy.run_module("plugtrain", run_name="__main__")
except SystemExit:
    pass
print("TORCH-IMPORTED" if any(m.split(".")[0] == "torch" for m in sys.modules) else "TORCH-FREE")
"""


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "optimizer", "--json"],
        ["show", "SGD"],
        ["show", "LinearLR", "--json"],
        ["plugins"],
        ["plugins", "--json"],
    ],
)
def test_listing_commands_do_not_import_torch(args):
    done = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE.format(args=args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1] == "TORCH-FREE", done.stdout + done.stderr


def _modules_loaded_by(code: str, prefixes: tuple[str, ...]) -> str:
    """The sorted modules starting with ``prefixes`` that a fresh interpreter holds after
    running ``code``, as it prints them."""
    report = f"\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith({prefixes!r})))"
    done = subprocess.run(
        [sys.executable, "-c", code + report],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return done.stdout.strip()


def test_names_and_describe_do_not_import_torch():
    code = (
        "import sys, plugtrain\n"
        "for kind in ('optimizer', 'scheduler', 'backend', 'model', 'dataloader'):\n"
        "    for name in plugtrain.names(kind):\n"
        "        plugtrain.describe(kind, name)\n"
    )
    assert _modules_loaded_by(code, ("torch",)) == "[]"


def test_the_command_line_starts_without_checkpoint_opening_or_run_file_readers():
    """What every command imports before it runs: neither the conversion package nor the
    configuration readers (``plugtrain list`` from its cache imports nothing more)."""
    prefixes = ("plugtrain.conversion", "plugtrain.config", "torch")
    assert _modules_loaded_by("import plugtrain.cli", prefixes) == "[]"


def test_list_shows_name_kind_provider_version_and_summary(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header == ["NAME", "KIND", "PROVIDER", "VERSION", "SUMMARY"]
    mlp = next(line for line in out.splitlines() if line.startswith("MLP "))
    assert "model" in mlp
    assert "plugtrain" in mlp
    assert "multi-layer perceptron" in mlp


def test_list_json_is_machine_readable(capsys):
    assert main(["list", "model", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["kind"] for row in rows} == {"model"}
    mlp = next(row for row in rows if row["name"] == "MLP")
    assert mlp["provider"] == "plugtrain"
    assert mlp["plugin"] == "builtin"


def test_show_prints_arguments_defaults_constraints_and_docstring(capsys):
    assert main(["show", "mlp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("MLP (model) from plugtrain")
    assert "hidden: int (default 128) [> 0]" in out
    assert "in_features: int (required) [> 0]" in out
    assert "dropout: float (default 0.0) [>= 0, < 1]" in out


def test_show_json_lists_every_argument(capsys):
    assert main(["show", "MLP", "--kind", "model", "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    names = [a["name"] for a in info["arguments"]]
    assert names[:3] == ["in_features", "out_features", "hidden"]
    assert info["distribution"] == "plugtrain"


def test_an_unknown_name_is_an_error_without_traceback():
    done = run_cli("show", "MLQ")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "No component named 'MLQ'. Did you mean 'MLP'?" in done.stderr


def test_traceback_flag_shows_the_traceback():
    done = run_cli("--traceback", "show", "MLQ")
    assert done.returncode != 0
    assert "Traceback" in done.stderr


def test_plugins_lists_distributions_status_and_hooks(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "builtin: plugtrain" in out
    assert "[loaded]" in out
    hooks = (
        "plugtrain_register_callbacks, plugtrain_register_dataloaders, "
        "plugtrain_register_loggers, plugtrain_register_models"
    )
    assert f"hooks: {hooks}" in out


def test_p_no_blocks_a_plugin(capsys):
    assert main(["-p", "no:builtin", "list", "model", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in listed if row["plugin"] == "builtin"] == []
    blocked = ["-p", "no:builtin", "-p", "no:models", "-p", "no:encoders", "-p", "no:dpo"]
    assert main([*blocked, "list", "model", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # plugtrain-models' plugins blocked too


def test_a_failed_plugin_shows_in_plugins_and_others_keep_working(tmp_path):
    (tmp_path / "broken_plugin_mod.py").write_text("raise ImportError('missing dependency foo')\n")
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = run_cli("-p", "broken_plugin_mod", "plugins", env=env)
    assert done.returncode == 0
    assert "broken_plugin_mod: local [failed]" in done.stdout
    assert "missing dependency foo" in done.stdout
    assert done.stderr.count("missing dependency foo") == 1
    listed = run_cli("-p", "broken_plugin_mod", "list", "model", env=env)
    assert "MLP" in listed.stdout


def test_strict_mode_makes_the_cli_fail(tmp_path):
    (tmp_path / "broken_plugin_mod.py").write_text("raise ImportError('missing dependency foo')\n")
    env = {
        "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PLUGTRAIN_STRICT_PLUGINS": "1",
    }
    done = run_cli("-p", "broken_plugin_mod", "list", env=env)
    assert done.returncode == 1
    assert "plugtrain: error: plugin 'broken_plugin_mod'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_program_calling_main_keeps_its_own_logging_set_up(tmp_path, fresh_backend, capsys):
    import logging
    from pathlib import Path

    quickstart = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"
    logger = logging.getLogger("plugtrain")
    mine = logging.NullHandler()
    logger.addHandler(mine)
    before = (list(logger.handlers), logger.level, logger.propagate)
    try:
        overrides = [f"trainer.init.model_dir={tmp_path}", "trainer.init.loop.max_steps=2"]
        arguments = ["fit", str(quickstart)]
        for override in overrides:
            arguments += ["--set", override]
        assert main(arguments) == 0, capsys.readouterr().err
        assert "step 2/2" in capsys.readouterr().err  # fit logged through its own handler
        assert (list(logger.handlers), logger.level, logger.propagate) == before
    finally:
        logger.removeHandler(mine)
