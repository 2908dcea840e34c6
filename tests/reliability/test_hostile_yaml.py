"""Hostile run files: each is a clean configuration error (exit 2) naming what and where.

Risky inputs (bombs, huge and endless files, code-running tags) run in a subprocess whose
``timeout`` is a hang guard, not a performance threshold. Nothing a file names is imported
unless the file lists it under ``plugins:``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.reliability import (
    assert_positioned_config_error,
    error_lines,
    run_cli,
    run_subprocess,
    subprocess_env,
)

from plugtrain.config.reading.yaml_loader import MAX_EXPANDED_NODES, MAX_FILE_BYTES

pytestmark = pytest.mark.usefixtures("keep_registry")

VALID = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 64, out_features: 10}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 2}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 8}}}}
"""


def _write(tmp_path: Path, content: str | bytes, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def _single_issue(outcome, path: Path) -> str:
    assert outcome.status == 2, outcome
    assert "Traceback" not in outcome.err
    (issue,) = error_lines(outcome.err)
    assert issue.startswith(str(path)), issue
    return issue


@pytest.mark.parametrize(
    "tagged",
    [
        '!!python/object/apply:os.system ["touch {marker}"]',
        '!!python/object/new:os.system ["touch {marker}"]',
        "!!python/name:os.system",
        "!!python/module:os",
        '!!python/object/apply:subprocess.call [["touch", "{marker}"]]',
    ],
)
def test_h01_python_tags_are_rejected_and_nothing_runs(tagged, tmp_path):
    marker = tmp_path / "pwned"
    text = "trainer:\n  init:\n    seed: " + tagged.format(marker=marker) + "\n"
    run = _write(tmp_path, text)
    outcome = run_subprocess("check", str(run))
    assert_positioned_config_error(outcome, run, text)
    assert f"{run}:3:11: " in outcome.err
    assert "only plain YAML is accepted" in outcome.err
    assert not marker.exists()


def test_h02_an_unknown_local_tag_is_rejected_with_its_position(tmp_path):
    run = _write(tmp_path, "trainer: !include other.yaml\n")
    outcome = run_cli("check", str(run))
    assert "could not determine a constructor for the tag '!include'" in _single_issue(outcome, run)


def test_h03_an_alias_expansion_bomb_is_rejected(tmp_path):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 9) + "]")
    run = _write(tmp_path, "\n".join(lines) + "\n")
    outcome = run_subprocess("check", str(run))
    issue = _single_issue(outcome, run)
    assert f"expands to more than {MAX_EXPANDED_NODES} values" in issue


def test_h04_an_alias_that_contains_itself_is_rejected(tmp_path):
    text = "trainer:\n  init:\n    schedulers: &s\n      - ChainedLR: {schedulers: *s}\n"
    run = _write(tmp_path, text)
    issue = _single_issue(run_cli("check", str(run)), run)
    assert issue == f"{run}:4:33: alias *s refers to a value that contains it (a cycle)"


def test_h05_a_file_over_the_size_limit_is_rejected_before_parsing(tmp_path):
    run = _write(tmp_path, b"# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    outcome = run_subprocess("check", str(run))
    assert _single_issue(outcome, run) == f"{run}: file is larger than 1 MiB"


def test_h06_a_file_with_too_many_values_is_rejected_early(tmp_path):
    text = "trainer: [" + "1, " * (MAX_EXPANDED_NODES + 10) + "1]\n"
    run = _write(tmp_path, text)
    outcome = run_subprocess("check", str(run))
    issue = _single_issue(outcome, run)
    assert f"more than {MAX_EXPANDED_NODES} values" in issue
    assert issue.startswith(f"{run}:1:")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[" * 100_000, "1:202"),
        ("{a: " * 50_000, "1:802"),
        ("".join("  " * i + "- \n" for i in range(400)), "202:403"),
        ("".join("  " * i + f"k{i}:\n" for i in range(400)) + "  " * 400 + "x\n", "201:401"),
    ],
    ids=["flow_sequences", "flow_mappings", "block_sequences", "block_mappings"],
)
def test_h07_deep_nesting_is_rejected_with_a_position(text, where, tmp_path):
    run = _write(tmp_path, text)
    outcome = run_subprocess("check", str(run))
    assert _single_issue(outcome, run) == f"{run}:{where}: nesting deeper than 200 levels"


@pytest.mark.parametrize(
    ("raw", "where", "byte"),
    [
        (b"trainer:\n  init: {seed: \xff}\n", "2:16", "0xff"),
        (b"trainer:\n  init: {seed: 1}  # caf\xc3\n", "2:25", "0xc3"),
        (b"trainer: \xc0\xaf\n", "1:10", "0xc0"),
        (b"trainer: \xed\xa0\x80\n", "1:10", "0xed"),
        ("trainer: 1\n".encode("utf-16"), "1:1", "0xff"),
    ],
    ids=["invalid_byte", "truncated_sequence", "overlong", "surrogate", "utf16"],
)
def test_h08_invalid_utf8_names_the_line_column_and_byte(raw, where, byte, tmp_path):
    run = _write(tmp_path, raw)
    issue = _single_issue(run_cli("check", str(run)), run)
    assert issue == f"{run}:{where}: not valid UTF-8 (byte {byte})"


@pytest.mark.parametrize("character", ["\x00", "\x07", "\x1b", "\ufffe"])
def test_h09_control_characters_name_the_line_and_column(character, tmp_path):
    run = _write(tmp_path, f"trainer:\n  init: {{seed: 1{character}}}\n")
    issue = _single_issue(run_cli("check", str(run)), run)
    assert issue.startswith(f"{run}:2:17: character U+{ord(character):04X} is not allowed")


@pytest.mark.parametrize(
    ("text", "where", "first"),
    [
        ("trainer: {}\nplugins: []\ntrainer: {}\n", "3:1", 1),
        ("trainer:\n  init:\n    seed: 1\n    seed: 2\n", "4:5", 3),
        ("trainer:\n  - trainer: {init: {}, init: {}}\n", "2:25", 2),
        ("trainer:\n  init:\n    model: {MLP: {hidden: 1, hidden: 2}}\n", "3:30", 3),
        ("trainer:\n  init: {}\n  init: {}\n", "3:3", 2),
        ("trainer:\n  init:\n    1: a\n    1.0: b\n", "4:5", 3),
    ],
    ids=["top", "nested", "in_a_list", "flow", "sections", "equal_numbers"],
)
def test_h10_duplicate_keys_name_both_lines(text, where, first, tmp_path):
    run = _write(tmp_path, text)
    issue = _single_issue(run_cli("check", str(run)), run)
    assert issue.startswith(f"{run}:{where}: duplicate key ")
    assert issue.endswith(f"(first defined at line {first})")


def test_h10_keys_merged_from_an_anchor_may_be_overridden(tmp_path):
    text = VALID.format(model_dir=tmp_path / "m").replace(
        "    optimizer: {SGD: {lr: 0.1}}\n",
        "    optimizer:\n      SGD:\n        <<: &sgd {lr: 0.1, momentum: 0.9}\n        lr: 0.2\n",
    )
    run = _write(tmp_path, text)
    assert run_cli("check", str(run)).status == 0


def test_h11_a_directory_in_place_of_a_run_file_is_a_clean_error(tmp_path):
    outcome = run_subprocess("check", str(tmp_path))
    assert _single_issue(outcome, tmp_path) == f"{tmp_path}: is a directory, not a run file"


def test_h12_a_missing_run_file_is_a_clean_error(tmp_path):
    run = tmp_path / "absent.yaml"
    outcome = run_subprocess("fit", str(run))
    assert _single_issue(outcome, run) == f"{run}: no such file"


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_h13_an_endless_file_is_read_only_up_to_the_limit():
    outcome = run_subprocess("check", "/dev/zero")
    assert _single_issue(outcome, Path("/dev/zero")) == "/dev/zero: file is larger than 1 MiB"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trainer: {}\n---\ntrainer: {}\n", "2:1: but found another document"),
        ("", "1:1: a run file is a mapping with 'trainer:', got an empty file"),
        ("# only a comment\n", "1:1: a run file is a mapping with 'trainer:', got an empty file"),
        ("- trainer: {}\n", "1:1: a run file is a mapping with 'trainer:', got LocatedList"),
    ],
    ids=["two_documents", "empty", "only_comments", "a_list"],
)
def test_h14_files_that_are_not_one_mapping_are_clean_errors(text, message, tmp_path):
    run = _write(tmp_path, text)
    assert _single_issue(run_cli("check", str(run)), run) == f"{run}:{message}"


CANARY = """\
import pathlib, os
pathlib.Path(os.environ["CANARY_MARKER"]).write_text("imported")
"""


@pytest.mark.parametrize("command", ["check", "fit"])
@pytest.mark.slow
def test_h15_component_names_that_are_module_paths_import_nothing(command, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "canary_mod.py").write_text(CANARY)
    marker = tmp_path / "marker"
    env = subprocess_env(PYTHONPATH=os.pathsep.join([str(site), *sys.path]))
    env["CANARY_MARKER"] = str(marker)
    text = VALID.format(model_dir=tmp_path / "model")
    text = text.replace("{MLP:", "{canary_mod:").replace("{SGD:", "{canary_mod.Thing:")
    text = text.replace("{Digits:", "{'canary_mod:Loader':")
    run = _write(tmp_path, text)
    outcome = run_subprocess(command, str(run), env=env)
    assert_positioned_config_error(outcome, run, text)
    assert "Unknown model 'canary_mod'" in outcome.err
    assert "train_dataloader.canary_mod:Loader: Unknown dataloader 'Loader'" in outcome.err
    assert not marker.exists(), "a component name caused an import"
    assert not (tmp_path / "model").exists()

    listed = _write(tmp_path, "plugins: [canary_mod]\n" + text, name="listed.yaml")
    outcome = run_subprocess(command, str(listed), env=env)
    assert outcome.status == 2
    if command == "fit":
        assert marker.read_text() == "imported", "plugins: is the way a run file imports code"
    else:
        assert not marker.exists(), "check imported a module because a run file names it"
        assert "-p canary_mod" in outcome.err


def test_h16_a_python_tag_in_a_set_override_is_rejected(tmp_path):
    marker = tmp_path / "pwned"
    run = _write(tmp_path, VALID.format(model_dir=tmp_path / "m"))
    value = f'trainer.init.seed=!!python/object/apply:os.system ["touch {marker}"]'
    outcome = run_cli("check", str(run), "--set", value)
    assert outcome.status == 2
    assert "--set trainer.init.seed: the value is not valid YAML" in outcome.err
    assert not marker.exists()


def _set_error(outcome) -> str:
    assert outcome.status == 2, outcome
    assert "Traceback" not in outcome.err
    (issue,) = error_lines(outcome.err)
    return issue


def test_h17_an_alias_bomb_in_a_set_value_is_rejected_at_once(tmp_path):
    # 405 bytes: 9 levels of 9 aliases, 387 million values once expanded (it used to hang)
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
    bomb = "{" + ", ".join(levels) + "}"
    run = _write(tmp_path, VALID.format(model_dir=tmp_path / "m"))
    outcome = run_subprocess("check", str(run), "--set", f"trainer.init.seed={bomb}")
    issue = _set_error(outcome)
    assert issue.startswith("--set trainer.init.seed: the value is not valid YAML: ")
    assert f"expands to more than {MAX_EXPANDED_NODES} values" in issue
    assert issue.endswith("of the value)")
    cycle = "trainer.init.schedulers=&s [{ChainedLR: {schedulers: *s}}]"
    issue = _set_error(run_subprocess("check", str(run), "--set", cycle))
    assert "alias *s refers to a value that contains it (a cycle) (at line 1, column" in issue


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "trainer.init.seed=" + "[" * 5000,
            "--set trainer.init.seed: the value is not valid YAML: nesting deeper than 200 "
            "levels (at line 1, column 202 of the value)",
        ),
        (
            "trainer.init.seed=" + "{a: " * 5000,
            "--set trainer.init.seed: the value is not valid YAML: nesting deeper than 200 "
            "levels (at line 1, column 802 of the value)",
        ),
        (
            "trainer.init.seed=" + "[" * 199 + "]" * 199,
            "--set trainer.init.seed: nesting deeper than 200 levels "
            "(3 in the key path, 199 in the value)",
        ),
        (
            ".".join(["trainer"] * 5000) + "=1",
            "--set: the key path has 5000 levels; nesting deeper than 200",
        ),
    ],
    ids=["brackets", "mappings", "path_and_value", "key_path"],
)
def test_h18_deep_nesting_in_a_set_override_is_a_clean_error(value, message, tmp_path):
    run = _write(tmp_path, VALID.format(model_dir=tmp_path / "m"))
    assert _set_error(run_subprocess("check", str(run), "--set", value)) == message
    assert not (tmp_path / "m").exists()


def test_h18_values_from_set_are_positioned_at_the_set(tmp_path):
    run = _write(tmp_path, VALID.format(model_dir=tmp_path / "m"))
    outcome = run_cli(
        "check",
        str(run),
        "--set",
        "trainer.init.optimizer={SGD: {lr: -1}}",
        "--set",
        "trainer.init.seed=x",
    )
    assert outcome.status == 2
    assert error_lines(outcome.err) == [
        "--set trainer.init.seed:1:1: trainer.init.seed: must be of type int | None, got str 'x'",
        "--set trainer.init.optimizer:1:12: trainer.init.optimizer.SGD.lr: must be >= 0, got -1",
    ]
