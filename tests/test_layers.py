"""The floors of the package: the small core and ``config/`` never reach up, nor into torch.

Read from the source's import statements (every one, including those inside functions, except
under ``if TYPE_CHECKING:``), so a lazy import cannot slip a floor either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import plugtrain

PACKAGE = Path(plugtrain.__file__).parent

# The top-level modules that sit above the small core: the command line and the pytest plugin.
ON_TOP = {"cli.py", "testing.py", "__main__.py"}
# Implementation modules of the core's own plugin: loaded lazily, like any plugin's.
BUILTIN_IMPLEMENTATIONS = {
    "builtin/models.py",
    "builtin/data.py",
    "builtin/gpt.py",
    "builtin/text.py",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _modules(floor: str) -> list[Path]:
    if floor == "small core":
        paths = [p for p in PACKAGE.glob("*.py") if p.name not in ON_TOP]
        paths += [
            p
            for p in (PACKAGE / "builtin").glob("*.py")
            if p.relative_to(PACKAGE).as_posix() not in BUILTIN_IMPLEMENTATIONS
        ]
        return sorted(paths)
    return sorted((PACKAGE / floor).rglob("*.py"))


def _violations(floor: str, forbidden: tuple[str, ...]) -> list[str]:
    problems = []
    for path in _modules(floor):
        for line, name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                problems.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    return problems


UPPER = ("plugtrain.train", "plugtrain.authoring", "plugtrain.cli", "plugtrain.testing")


@pytest.mark.parametrize(
    ("floor", "forbidden"),
    [
        ("small core", ("torch", *UPPER)),
        ("config", ("torch", *UPPER)),
        ("authoring", ("torch", "plugtrain.cli", "plugtrain.testing")),
        ("train", ("plugtrain.cli", "plugtrain.testing")),
    ],
)
def test_floor_imports_nothing_above_it(floor: str, forbidden: tuple[str, ...]) -> None:
    assert _modules(floor), f"no modules found for {floor}"
    assert _violations(floor, forbidden) == []


def test_the_check_finds_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    import torch\n    from plugtrain.train import trainer\n")
    assert _imports(module) == [
        (2, "torch"),
        (3, "plugtrain.train"),
        (3, "plugtrain.train.trainer"),
    ]


def test_importing_the_lower_floors_loads_no_torch() -> None:
    code = (
        "import sys, plugtrain, plugtrain.config, plugtrain.registry, plugtrain.protocols; "
        "plugtrain.names('optimizer'); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_old_import_paths_are_the_moved_modules() -> None:
    import plugtrain.optim.lr_scheduler as old_scheduler_module
    import plugtrain.train.optim.lr_scheduler as scheduler_module
    import plugtrain.train.trainer as trainer_module
    import plugtrain.trainer as old_trainer_module

    assert old_trainer_module is trainer_module
    assert old_scheduler_module is scheduler_module
    assert trainer_module.__spec__.name == "plugtrain.train.trainer"
    assert plugtrain.Trainer is trainer_module.Trainer
