"""Plugin isolation that holds, and code a run file may (and may not) import.

Plugins here are real modules and real distributions (``*.dist-info``) in folders on
``PYTHONPATH`` of a fresh ``python -m plugtrain`` (or the installed ``plugtrain`` script); every
import is recorded by the module itself writing a marker file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
from support.reliability import (
    HANG_GUARD_S,
    Outcome,
    run_subprocess,
    subprocess_env,
    write_dist,
)

from plugtrain import hookimpl
from plugtrain.authoring import jsonschema
from plugtrain.discovery import loading as plugins

pytestmark = pytest.mark.slow

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
  validate:
    val_dataloader: {{Digits: {{batch_size: 8, split: val}}}}
"""

RECORDS = """\
import os, pathlib
pathlib.Path(os.environ["MARKERS"], __name__).write_text("imported")
"""

HELPER = (
    RECORDS
    + '''
import attrs
import torch
from plugtrain import hookimpl
from plugtrain.schema import arg

print("helper says hello on stdout")


@attrs.frozen
class HelperArgs:
    """SGD under another name."""

    lr: float = arg(help="learning rate", gt=0)


class HelperSGD(torch.optim.SGD):
    def __init__(self, params, lr):
        super().__init__(params, lr=lr)


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("HelperSGD", "helper:HelperSGD", schema=HelperArgs)
'''
)


def _env(tmp_path: Path, *folders: Path, **changes: str) -> dict[str, str]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    path = os.pathsep.join([*map(str, folders), *sys.path])
    return subprocess_env(PYTHONPATH=path, MARKERS=str(markers), **changes)


def _imported(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "markers").iterdir()}


def _run_file(tmp_path: Path, optimizer: str = "SGD", plugins_line: str = "") -> Path:
    path = tmp_path / "run.yaml"
    # One model_dir per optimizer: a run must not resume another optimizer's checkpoint.
    text = RUN.format(model_dir=tmp_path / f"model-{optimizer}", optimizer=optimizer)
    path.write_text(plugins_line + text)
    return path


def _module(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    return folder


# -- P06: SystemExit ---------------------------------------------------------------------------

EXITS_AT_IMPORT = RECORDS + "import sys\nsys.exit(0)\n"
EXITS_IN_HOOK = (
    RECORDS
    + """
import sys
from plugtrain import hookimpl

@hookimpl
def plugtrain_register_models(registry):
    sys.exit(3)
"""
)


def _exiting_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    write_dist(
        site,
        "acme-exits",
        {"acme_exits": EXITS_AT_IMPORT, "acme_exits_hook": EXITS_IN_HOOK},
        [("acme_exits", "acme_exits"), ("acme_exits_hook", "acme_exits_hook")],
    )
    return site


@pytest.mark.parametrize("command", ["check", "fit", "list"])
def test_p06_a_plugin_calling_sys_exit_is_a_reported_failure_not_a_silent_exit(command, tmp_path):
    env = _env(tmp_path, _exiting_site(tmp_path))
    run = _run_file(tmp_path)
    args = [command] if command == "list" else [command, str(run)]
    outcome = run_subprocess(*args, env=env)
    assert outcome.status == 0, outcome
    for name, code in (("acme_exits", "0"), ("acme_exits_hook", "3")):
        line = f"plugtrain: plugin '{name}' from acme-exits 1.0 failed and was skipped: "
        assert outcome.err.count(line) == 1, outcome.err
        assert f"SystemExit({code}): the plugin called sys.exit()" in outcome.err
    assert _imported(tmp_path) == {"acme_exits", "acme_exits_hook"}
    if command == "fit":  # the run really happened: two steps, a checkpoint, metrics
        assert (tmp_path / "model-SGD" / "checkpoint_2.mdl").is_file()
        assert "trainer 0: validation" in outcome.out
    if command == "list":
        assert "SGD" in outcome.out


def test_p06_strict_mode_makes_a_plugin_s_sys_exit_an_error(tmp_path):
    env = _env(tmp_path, _exiting_site(tmp_path), PLUGTRAIN_STRICT_PLUGINS="1")
    outcome = run_subprocess("fit", str(_run_file(tmp_path)), env=env)
    assert outcome.status == 1, outcome
    assert outcome.err.startswith(
        "plugtrain: error: plugin 'acme_exits' from acme-exits 1.0 failed: "
        "SystemExit(0): the plugin called sys.exit()"
    ), outcome.err
    assert "Traceback" not in outcome.err
    assert not (tmp_path / "model-SGD").exists()


# -- P07: KeyboardInterrupt -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["import", "hook"])
def test_p07_a_keyboard_interrupt_from_a_plugin_stops_the_command_naming_the_plugin(
    where, tmp_path
):
    body = {
        "import": "raise KeyboardInterrupt\n",
        "hook": (
            "from plugtrain import hookimpl\n\n@hookimpl\n"
            "def plugtrain_register_optimizers(registry):\n    raise KeyboardInterrupt\n"
        ),
    }[where]
    site = tmp_path / "site"
    write_dist(site, "acme-ctrl-c", {"acme_ctrl_c": body}, [("acme_ctrl_c", "acme_ctrl_c")])
    outcome = run_subprocess("check", str(_run_file(tmp_path)), env=_env(tmp_path, site))
    assert outcome.status == 130, outcome
    what = {"import": "while loading", "hook": "in hook plugtrain_register_optimizers of"}[where]
    assert (
        outcome.err == f"plugtrain: interrupted {what} plugin 'acme_ctrl_c' from acme-ctrl-c 1.0\n"
    )
    assert outcome.out == ""


def test_p07_ctrl_c_while_a_slow_plugin_imports_names_that_plugin(tmp_path):
    site = tmp_path / "site"
    started = tmp_path / "started"
    slow = f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(60)\n"
    write_dist(site, "acme-slow", {"acme_slow": slow}, [("acme_slow", "acme_slow")])
    process = subprocess.Popen(
        [sys.executable, "-m", "plugtrain", "list", "--json"],
        env=_env(tmp_path, site),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + HANG_GUARD_S
    while not started.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=HANG_GUARD_S)
    assert process.returncode == 130
    assert err == "plugtrain: interrupted while loading plugin 'acme_slow' from acme-slow 1.0\n"
    assert out == ""


# -- P08: what plugins print ----------------------------------------------------------------------


def test_p08_what_a_plugin_prints_while_loading_never_reaches_json_output(tmp_path):
    site = tmp_path / "site"
    chatty = """\
import sys
from plugtrain import hookimpl
print("chatty at import")
sys.stdout.write("chatty writes\\n")

@hookimpl
def plugtrain_register_optimizers(registry):
    print("chatty in its hook")
"""
    write_dist(site, "acme-chatty", {"acme_chatty": chatty}, [("acme_chatty", "acme_chatty")])
    env = _env(tmp_path, site)
    commands = {
        "list": ("list", "--json"),
        "show": ("show", "SGD", "--json"),
        "plugins": ("plugins", "--json"),
        "schema": ("schema",),
    }
    for command, args in commands.items():
        outcome = run_subprocess(*args, env=env)
        assert outcome.status == 0, (command, outcome)
        data = json.loads(outcome.out)  # the whole of stdout is the JSON document
        assert data, command
        for text in ("chatty at import", "chatty writes", "chatty in its hook"):
            assert text in outcome.err, (command, outcome.err)


@attrs.frozen
class _HelperRuns:
    """The outcome of each command, what each imported, and the checkpoint ``fit`` wrote."""

    outcomes: dict[str, Outcome]
    imported: dict[str, set[str]]
    checkpoint_written: bool


@pytest.fixture(scope="module")
def helper_commands(tmp_path_factory: pytest.TempPathFactory) -> _HelperRuns:
    """A run file naming the local plugin ``helper`` under ``plugins:``: ``check -p helper``,
    ``fit``, then ``validate`` of it, in fresh interpreters (shared by P08 and P09)."""
    tmp_path = tmp_path_factory.mktemp("helper_commands")
    local = _module(tmp_path / "local", "helper", HELPER)
    env = _env(tmp_path, local)
    run = _run_file(tmp_path, "HelperSGD", "plugins: [helper]\n")
    outcomes, imported = {}, {}
    for name, args in (
        ("check", ("-p", "helper", "check")),
        ("fit", ("fit",)),
        ("validate", ("validate",)),
    ):
        outcomes[name] = run_subprocess(*args, str(run), env=env)
        imported[name] = _imported(tmp_path)
        (tmp_path / "markers" / "helper").unlink(missing_ok=True)
    written = (tmp_path / "model-HelperSGD" / "checkpoint_2.mdl").is_file()
    return _HelperRuns(outcomes, imported, written)


def test_p08_a_run_file_plugin_that_prints_at_import_prints_on_stderr(helper_commands, tmp_path):
    outcome = helper_commands.outcomes["fit"]
    assert outcome.status == 0, outcome
    assert "helper says hello on stdout" in outcome.err
    assert outcome.out.splitlines() == [
        line for line in outcome.out.splitlines() if line.startswith("trainer 0: validation ")
    ]
    # `plugins: [this]`: Python's own `this` prints the Zen of Python when imported
    this = _run_file(tmp_path, plugins_line="plugins: [this]\n")
    outcome = run_subprocess("fit", str(this), env=_env(tmp_path))
    assert outcome.status == 0, outcome
    assert "The Zen of Python" in outcome.err
    assert "Zen" not in outcome.out


# -- P09: a run file's plugins: ------------------------------------------------------------------


def test_p09_check_and_plot_import_no_local_module_a_run_file_names(tmp_path):
    local = _module(tmp_path / "local", "helper", HELPER)
    env = _env(tmp_path, local)
    run = _run_file(tmp_path, "HelperSGD", "plugins: [helper]\n")
    for command in (("check", str(run)), ("plot", str(run), "-o", str(tmp_path / "p.png"))):
        outcome = run_subprocess(*command, env=env)
        assert outcome.status == 2, outcome
        assert "plugtrain: not importing 'helper' from the run file's plugins" in outcome.err
        assert "Unknown optimizer 'HelperSGD'" in outcome.err
        assert "The run file's plugins helper were not imported" in outcome.err
        assert "-p helper" in outcome.err
        assert "Traceback" not in outcome.err
        assert not (tmp_path / "markers" / "helper").exists(), command
    # A run file that names a local plugin it does not need is still fine for check.
    unused = _run_file(tmp_path, "SGD", "plugins: [helper]\n")
    outcome = run_subprocess("check", str(unused), env=env)
    assert outcome.status == 0, outcome
    assert not (tmp_path / "markers" / "helper").exists()


def test_p09_check_imports_a_run_file_plugin_named_with_p_and_fit_validate_import_it(
    helper_commands,
):
    checked = helper_commands.outcomes["check"]
    assert checked.status == 0, checked
    assert "not importing" not in checked.err
    for command in ("check", "fit", "validate"):
        assert helper_commands.outcomes[command].status == 0, helper_commands.outcomes[command]
        assert helper_commands.imported[command] == {"helper"}, command
    assert helper_commands.checkpoint_written


def test_p09_check_loads_an_installed_plugin_a_run_file_names_even_without_autoload(tmp_path):
    site = tmp_path / "site"
    installed = HELPER.replace('"helper:HelperSGD"', '"acme_helper:HelperSGD"')
    write_dist(site, "acme-helper", {"acme_helper": installed}, [("acme_helper", "acme_helper")])
    env = _env(tmp_path, site, PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD="1")
    plain = _run_file(tmp_path, "HelperSGD")
    assert run_subprocess("check", str(plain), env=env).status == 2
    assert not (tmp_path / "markers" / "acme_helper").exists()
    # by entry-point name, distribution name or module; `backends` is plugtrain's own
    for listed in ("acme_helper", "acme-helper"):
        run = _run_file(tmp_path, "HelperSGD", f"plugins: [{listed}, backends]\n")
        outcome = run_subprocess("check", str(run), env=env)
        assert outcome.status == 0, outcome
        assert _imported(tmp_path) == {"acme_helper"}


# -- P10: both entry points ----------------------------------------------------------------------

SCRIPT = Path(sys.executable).with_name("plugtrain")


@pytest.mark.skipif(not SCRIPT.exists(), reason="the plugtrain script is not installed here")
def test_p10_the_script_and_python_m_find_the_same_modules(tmp_path):
    folder = tmp_path / "downloaded"
    _module(folder, "helper", HELPER)
    run = _run_file(folder, "HelperSGD", "plugins: [helper]\n")
    commands = {"script": [str(SCRIPT)], "module": [sys.executable, "-m", "plugtrain"]}
    outcomes: dict[tuple[str, str], Outcome] = {}
    imported: dict[tuple[str, str], bool] = {}
    for pythonpath in ("", "."):
        for entry, command in commands.items():
            env = _env(tmp_path)
            env.pop("PYTHONPATH")  # nothing but what each entry point puts on sys.path itself
            if pythonpath:
                env["PYTHONPATH"] = pythonpath
            done = subprocess.run(
                [*command, "fit", str(run)],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=HANG_GUARD_S,
                check=False,
            )
            outcomes[pythonpath, entry] = Outcome(done.returncode, done.stdout, done.stderr)
            imported[pythonpath, entry] = (tmp_path / "markers" / "helper").exists()
            (tmp_path / "markers" / "helper").unlink(missing_ok=True)
            shutil.rmtree(folder / "model", ignore_errors=True)
    for entry in commands:
        # the current folder is not searched: helper.py next to the run file is not imported
        refused = outcomes["", entry]
        assert refused.status == 2, (entry, refused)
        assert not imported["", entry], entry
        assert "helper is in the current folder, which plugtrain does not search" in refused.err
        # PYTHONPATH=. asks for it: both import it and train
        assert outcomes[".", entry].status == 0, (entry, outcomes[".", entry])
        assert imported[".", entry], entry


# -- P11: plugtrain schema with many components --------------------------------------------------


class _CountingList(list):  # type: ignore[type-arg]
    """A list that counts the items handed out by iterating over it."""

    visits = 0

    def __iter__(self):
        for item in super().__iter__():
            _CountingList.visits += 1
            yield item


def _many_optimizers(count: int) -> object:
    class Many:
        @hookimpl
        def plugtrain_register_optimizers(self, registry):
            for index in range(count):
                registry.register(
                    f"Opt{index}",
                    "acme_many:Opt",
                    schema="plugtrain_optimizers.schemas:SGDArgs",
                    aliases=(f"opt_alias_{index}",),
                )

    return Many()


def _schema_visits(count: int) -> tuple[int, dict[str, object]]:
    registry = plugins.build_registry(
        plugins.PluginSettings(autoload=True), extra=[("many", _many_optimizers(count))]
    )
    builder = jsonschema._Builder(registry)
    builder.components = {k: _CountingList(v) for k, v in builder.components.items()}
    _CountingList.visits = 0
    builder.section(jsonschema.RunFile, inline=True)
    return _CountingList.visits, builder.defs


def test_p11_plugtrain_schema_visits_each_component_a_bounded_number_of_times():
    """Counted, not timed: doubling the components at most doubles the work.

    Building the schema asked, for each component, questions about all the others (which
    names collide, which are unique ignoring case): 10,000 optimizers took minutes.
    """
    small, defs = _schema_visits(300)
    large, _ = _schema_visits(600)
    assert "optimizer.Opt299" in defs
    assert large <= 2 * small, (small, large)
