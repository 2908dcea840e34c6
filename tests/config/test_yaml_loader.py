"""The run-file YAML loader: positions, and clean errors for hostile or broken input."""

from __future__ import annotations

import pytest

from plugtrain.config.reading.yaml_loader import load_yaml, location_of, read_yaml_file
from plugtrain.errors import ConfigError


def _error(text, source="run.yaml"):
    with pytest.raises(ConfigError) as info:
        load_yaml(text, source)
    (issue,) = info.value.issues
    return issue


def test_every_key_and_value_knows_its_position():
    data = load_yaml(b"a: 1\nb:\n  - x: 2\n    y: [1, 2]\n", "run.yaml")
    assert data == {"a": 1, "b": [{"x": 2, "y": [1, 2]}]}
    assert location_of(data, "a") == "run.yaml:1:4"
    assert location_of(data, "b", of_key=True) == "run.yaml:2:1"
    assert location_of(data["b"], 0) == "run.yaml:3:5"
    assert location_of(data["b"][0], "y") == "run.yaml:4:8"


def test_duplicate_keys_are_rejected_with_both_lines():
    issue = _error(b"a: 1\nb: 2\na: 3\n")
    assert issue.location == "run.yaml:3:1"
    assert issue.message == "duplicate key 'a' (first defined at line 1)"


def test_python_tags_are_rejected_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    text = f'a: !!python/object/apply:os.system ["touch {marker}"]\n'
    issue = _error(text.encode())
    assert issue.location == "run.yaml:1:4"
    assert "only plain YAML is accepted" in issue.message
    assert not marker.exists()


def test_alias_bombs_are_rejected():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefg":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]")
    issue = _error("\n".join(lines).encode())
    assert "aliases repeated too often" in issue.message


def test_moderate_aliases_are_fine():
    data = load_yaml(b"base: &b {lr: 0.1}\nother: *b\n")
    assert data["other"] == {"lr": 0.1}


def test_invalid_utf8_names_line_and_column():
    issue = _error(b"a: 1\nb: \xff\n")
    assert issue.location == "run.yaml:2:4"
    assert "not valid UTF-8" in issue.message


def test_syntax_errors_point_at_the_problem():
    issue = _error(b"a: [1, 2\nb: 3\n")
    assert issue.location.startswith("run.yaml:")
    assert issue.message


def test_deep_nesting_is_a_clean_error():
    issue = _error(b"[" * 5000)
    assert "nesting" in issue.message or "deep" in issue.message


def test_missing_file_and_directory_are_clean_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_yaml_file(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        read_yaml_file(tmp_path)


def test_an_empty_document_is_none():
    assert load_yaml(b"") is None
