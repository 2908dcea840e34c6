"""Commands of plugin distributions: the entry-point group ``plugtrain.commands``.

Each case installs a distribution by hand (a module plus a ``*.dist-info`` naming it) in a
temporary folder put first on ``sys.path``, where ``importlib.metadata`` finds it like any
installed package; ``plugtrain preprocess`` is plugtrain-models' real entry point.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from plugtrain.cli import main
from plugtrain.commands import plugin as plugin_commands

HELLO = """
import argparse

def add_parser(commands, name):
    parser = commands.add_parser(name, help="say hello ({module})")
    parser.add_argument("--who", default="world")
    return parser

def run(args, out):
    if args.who == "bad":
        from plugtrain.errors import ConfigError
        raise ConfigError("--who: not bad")
    if args.who == "boom":
        raise ValueError("boom")
    out.write(f"hello {{args.who}} from {module}\\n")
    return 0
"""


def _install(
    site: Path,
    distribution: str,
    commands: dict[str, str],
    modules: dict[str, str] | None = None,
) -> None:
    """A distribution giving ``commands`` (command -> entry-point value) and ``modules``."""
    site.mkdir(parents=True, exist_ok=True)
    for name, source in (modules or {}).items():
        (site / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    folder = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n", encoding="utf-8"
    )
    lines = ["[plugtrain.commands]", *(f"{name} = {value}" for name, value in commands.items())]
    (folder / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "RECORD").write_text("", encoding="utf-8")


def _module() -> str:
    """A module name no other test (nor an earlier import) has used."""
    return f"acme_cmd_{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse wraps help at the terminal's width: one line per command here."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


# -- plugtrain-models' preprocess ------------------------------------------------------------


def test_preprocess_comes_through_the_entry_point_and_shows_in_help(capsys):
    pytest.importorskip("plugtrain_models", reason="plugtrain-models is not installed")
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group="plugtrain.commands")}
    assert found["preprocess"].value == "plugtrain_models.data.command"
    assert found["preprocess"].dist.metadata["Name"] == "plugtrain-models"
    shown = _help(capsys)
    assert "preprocess  write Model Zoo GPT HDF5 files from text or the stdlib corpus" in shown
    cli = Path(sys.modules["plugtrain.cli"].__file__).read_text(encoding="utf-8")
    assert "plugtrain_models" not in cli
    assert "preprocess" not in cli


def test_preprocess_runs_and_gets_every_word_after_it(tmp_path, capsys):
    pytest.importorskip("plugtrain_models", reason="plugtrain-models is not installed")
    out = tmp_path / "out"
    arguments = ["stdlib", "--stdlib-corpus", "3000", "--max-seq-length", "16", "-o", str(out)]
    assert main(["preprocess", *arguments, "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: ")
    assert (out / "data_params.json").is_file()
    with pytest.raises(SystemExit) as exited:  # preprocess's own parser answers --help
        main(["preprocess", "--help"])
    assert exited.value.code == 0
    assert "usage: plugtrain preprocess" in capsys.readouterr().out


def test_traceback_after_preprocess_is_plugtrains(tmp_path, capsys):
    pytest.importorskip("plugtrain_models", reason="plugtrain-models is not installed")
    from plugtrain.errors import TrainingError

    assert main(["preprocess", "-o", str(tmp_path / "a")]) == 1
    assert "give an INPUT" in capsys.readouterr().err
    with pytest.raises(TrainingError, match="give an INPUT"):
        main(["preprocess", "-o", str(tmp_path / "b"), "--traceback"])


def test_preprocess_without_plugtrain_models_says_to_install_it(monkeypatch, capsys):
    monkeypatch.setattr(plugin_commands, "_entry_points", list)
    assert main(["preprocess", "stdlib", "-o", "out"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "plugtrain: error: plugtrain preprocess writes Model Zoo's GPT HDF5 files and comes with "
        "plugtrain-models, which is not installed: pip install plugtrain-models\n"
    )
    assert "preprocess" not in _help(capsys)


def test_parser_and_help_import_no_torch():
    probe = (
        "import sys\n"
        "from plugtrain.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.stderr.strip().splitlines()[-1] == "NO-TORCH", done.stderr


# -- a distribution of our own ---------------------------------------------------------------


def test_a_plugin_command_is_listed_and_runs(site, capsys):
    module = _module()
    _install(site, "acme-hello", {"hello": module}, {module: HELLO.format(module=module)})
    assert f"hello       say hello ({module})" in _help(capsys)
    assert main(["hello", "--who", "you"]) == 0
    assert capsys.readouterr().out == f"hello you from {module}\n"
    assert main(["list", "optimizer", "--json"]) == 0  # the others keep working


def test_a_plugin_commands_errors_are_reported_like_any_other(site, capsys):
    module = _module()
    _install(site, "acme-hello", {"hello": module}, {module: HELLO.format(module=module)})
    assert main(["hello", "--who", "bad"]) == 2
    assert capsys.readouterr().err == "plugtrain: error: --who: not bad\n"
    assert main(["hello", "--who", "boom"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"plugtrain: error: command 'hello' of acme-hello 1.0 (entry point hello = {module}) "
        "raised ValueError: boom\n"
    )
    with pytest.raises(ValueError, match="boom"):
        main(["hello", "--who", "boom", "--traceback"])


def test_an_entry_point_that_fails_to_import_breaks_no_other_command(site, capsys):
    missing = _module()
    _install(site, "acme-broken", {"broken": f"{missing}:COMMAND"})
    assert main(["list", "optimizer"]) == 0
    captured = capsys.readouterr()
    assert "SGD" in captured.out
    assert "broken" not in captured.err
    assert "broken      (unavailable: acme-broken 1.0 failed to load it; run it to see why)\n" in (
        _help(capsys)
    )
    assert main(["broken", "--anything", "goes"]) == 1
    assert capsys.readouterr().err == (
        f"plugtrain: error: command 'broken' of acme-broken 1.0 (entry point broken = "
        f"{missing}:COMMAND) failed to load: ModuleNotFoundError: No module named '{missing}'\n"
    )


def test_an_add_parser_that_raises_is_taken_back(site, capsys):
    module = _module()
    source = """
        def add_parser(commands, name):
            parser = commands.add_parser(name, help="half made")
            parser.add_argument("--x")
            raise RuntimeError("no parser today")

        def run(args, out):
            return 0
    """
    _install(site, "acme-half", {"half": module}, {module: source})
    assert main(["plugins"]) == 0
    capsys.readouterr()
    assert "half made" not in _help(capsys)
    assert main(["half", "--x", "1"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"plugtrain: error: command 'half' of acme-half 1.0 (entry point half = {module}) "
        "failed to load: RuntimeError: no parser today\n"
    )


def test_two_distributions_giving_one_command_is_an_error_naming_both(site, capsys):
    first, second = _module(), _module()
    _install(site, "acme-one", {"hello": first}, {first: HELLO.format(module=first)})
    _install(site, "acme-two", {"hello": second}, {second: HELLO.format(module=second)})
    assert main(["show", "SGD"]) == 0  # the others keep working
    capsys.readouterr()
    assert main(["hello"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "plugtrain: error: command 'hello' is provided by 2 distributions: "
        f"acme-one 1.0 (entry point hello = {first}) and "
        f"acme-two 1.0 (entry point hello = {second}); uninstall all but one of them\n"
    )
    assert "(unavailable: given by both acme-one 1.0 and acme-two 1.0)" in _help(capsys)


def test_a_plugin_command_named_like_a_built_in_one_is_skipped_naming_both(site, capsys):
    module = _module()
    _install(site, "acme-list", {"list": module}, {module: HELLO.format(module=module)})
    assert main(["list", "optimizer", "--json"]) == 0  # the built-in one runs
    captured = capsys.readouterr()
    assert captured.out.startswith("[")
    assert captured.err == (
        f"plugtrain: command 'list' of acme-list 1.0 (entry point list = {module}) clashes "
        "with plugtrain's built-in command 'list' and was skipped\n"
    )
