"""``docs/reliability.md`` stays true: every case row has tests, every test has a row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support.reliability import ROOT

DOC = ROOT / "docs" / "reliability.md"
HERE = Path(__file__).resolve().parent
CASE_TEST = re.compile(r"test_([a-z])(\d\d)_")


def _rows() -> dict[str, list[str]]:
    """Case id -> the cells of its table row."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"[A-Z]\d\d", cells[0]):
            assert cells[0] not in rows, f"case {cells[0]} is listed twice"
            rows[cells[0]] = cells
    return rows


def _test_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]


def _case_tests() -> dict[str, list[tuple[str, str]]]:
    """Case id -> ``(file name, test name)`` of the suite's tests named ``test_<id>_...``."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(HERE.glob("test_*.py")):
        for name in _test_functions(path):
            match = CASE_TEST.match(name)
            if match:
                case = match.group(1).upper() + match.group(2)
                found.setdefault(case, []).append((path.name, name))
    return found


def test_every_case_in_the_table_has_tests_in_the_file_it_names():
    tests = _case_tests()
    for case, cells in _rows().items():
        where = cells[-1]
        if where.startswith("`tests/"):
            for reference in re.findall(r"`(tests/[^`]+)::(\w+)`", where):
                path, name = reference
                assert name in _test_functions(ROOT / path), f"{case}: no {path}::{name}"
            continue
        files = {file for file, _ in tests.get(case, [])}
        assert files == {where.strip("`")}, f"{case}: tests in {files}, the table says {where}"


def test_every_case_test_has_a_row_in_the_table():
    missing = sorted(set(_case_tests()) - set(_rows()))
    assert not missing, f"cases tested but not in docs/reliability.md: {missing}"


def _fuzz_constants() -> dict[str, object]:
    """The fuzzer's example counts and subprocess cases, read without importing it."""
    tree = ast.parse((HERE / "test_fuzz_run_files.py").read_text(encoding="utf-8"))
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.endswith("_EXAMPLES"):
                found[name] = ast.literal_eval(node.value)
            elif name == "SUBPROCESS_CASES" and isinstance(node.value, ast.Dict):
                found[name] = len(node.value.keys)
    return found


def test_the_counts_on_the_page_match_the_suite():
    text = DOC.read_text(encoding="utf-8")
    assert f"Cases: **{len(_rows())}** rows below." in text
    fuzz = _fuzz_constants()
    structure, texts, overrides = (
        fuzz["STRUCTURE_EXAMPLES"],
        fuzz["TEXT_EXAMPLES"],
        fuzz["OVERRIDE_EXAMPLES"],
    )
    total = structure + texts + overrides  # type: ignore[operator]
    assert total >= 2000
    assert (
        f"Fuzzed examples per run: **{total}** (F01 {structure}, F02 {texts}, "
        f"F03 {overrides}), plus {fuzz['SUBPROCESS_CASES']} real subprocess runs"
    ) in " ".join(text.split())
