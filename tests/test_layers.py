"""The floors and rooms of the package, as an executable rule.

Read from the source's import statements, every one: those inside functions (so a lazy import
cannot slip a floor) and those under ``if TYPE_CHECKING:`` (so an annotation cannot either):

- the floors are ordered, and a module imports only from its own floor or the ones below;
- the import graph of ``core/plugtrain`` has no cycle, counting the imports under
  ``TYPE_CHECKING`` too;
- the floors below ``train``, and ``authoring``, never import torch (annotations aside);
- the plugin distributions import only documented plugtrain modules (at run time), and never
  ``plugtrain.train``, not even for an annotation; the core imports the modules where they
  live, never through a documented path that names a module of a room;
- ``plugtrain.train`` is a facade (``trainer.py``) and rooms by job, ordered like the floors: a
  room imports a lower room only, and only through that room's ``__init__``; only ``assembly/``
  imports the facade;
- at most 8 modules lie loose at the top of ``core/plugtrain``; no room (a folder of modules)
  holds more than 12 modules or 3,000 lines; no module is longer than 600 lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import plugtrain
from plugtrain._public_paths import PUBLIC_PATHS

PACKAGE = Path(plugtrain.__file__).parent
REPO = PACKAGE.parents[1]

FLOORS = (
    "ground",
    "registry",
    "contract",
    "discovery",
    "bases",
    "mirrors",
    "builtin plugin",
    "config",
    "builtin implementations",
    "conversion",
    "train",
    "launching",
    "authoring",
    "top",
)
"""From the ground up. ``ground`` is the errors, the versions and the documented paths' finder;
``registry`` (components, argument schemas, kinds), ``contract`` (hook specifications, protocols,
the parallel strategy), ``discovery`` (loading plugins) and ``bases`` (the bases plugin authors
build on) are the core's rooms of the same names; ``mirrors`` are ``optim/`` and
``distributed.py`` (the ``cerebras.pytorch`` mirrors); ``builtin plugin`` is the torch-free part
of ``builtin/`` (its schemas and hook implementations). ``conversion`` is the checkpoint
converters' engine, which checkpoint loading uses; ``launching`` starts a run file's processes
(torchrun, SLURM). ``top`` is the command line (``cli`` and ``commands/``), the test kit and the
package facade (``plugtrain/__init__.py``, whose lazy attributes reach ``train``)."""

GROUND = ("_version", "_unset", "_public_paths", "errors")
ROOM_FLOORS = ("registry", "contract", "discovery", "bases", "config", "conversion", "train")
MIRRORS = ("optim", "distributed")
TOP = ("cli", "commands", "__main__", "testing")

TORCH_FREE = (
    "ground",
    "registry",
    "contract",
    "discovery",
    "bases",
    "mirrors",
    "builtin plugin",
    "config",
    "authoring",
)

TORCH_FREE_MODULES = (
    *(
        f"plugtrain.conversion{part}"
        for part in ("", ".declaration", ".configs", ".lookup", ".files", ".weights")
    ),
    "plugtrain.launching",
    "plugtrain.launching.processes",
    "plugtrain.launching.cluster",
)
"""Modules of a floor that uses torch which listing, ``check`` or a backend's schema import, so
must not."""

DOCUMENTED = (
    "plugtrain",
    "plugtrain.backend_base",
    "plugtrain.curve",
    "plugtrain.distributed",
    "plugtrain.errors",
    "plugtrain.hookspecs",
    "plugtrain.hyperparams",
    "plugtrain.launching",
    "plugtrain.optim",
    "plugtrain.protocols",
    "plugtrain.registry",
    "plugtrain.schema",
    "plugtrain.scheduler",
    "plugtrain.sparsity_schema",
    "plugtrain.strategy",
    "plugtrain.tags",
    "plugtrain.testing",
    "plugtrain.config",
    "plugtrain.config.plan",
    "plugtrain.config.precision",
    "plugtrain.conversion",
    "plugtrain.conversion.configs",
    "plugtrain.authoring.core_versions",
    "plugtrain.train.trainer",
)
"""The modules README.md lists as public: the only ones a plugin distribution may import."""

DOCUMENTED_IN_GUIDES = ("plugtrain.compat",)
"""Modules the plugin authors' guides name for a helper (``core_requirement``), kept importable
by that path."""

MAX_LOOSE = 8
MAX_ROOM_MODULES = 12
MAX_ROOM_LINES = 3000


def module_name(path: Path) -> str:
    """``plugtrain.train.loop.training_loop`` for ``core/plugtrain/train/loop.py``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, *, annotations: bool = True) -> list[tuple[int, str]]:
    """``(line, module)`` of every absolute import, ``from a import b`` as ``a`` and ``a.b``;
    those under ``if TYPE_CHECKING:`` only with ``annotations``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    if not annotations:
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


def _targets(path: Path, *, annotations: bool = True) -> list[tuple[int, str]]:
    """The plugtrain modules ``path`` imports: ``from plugtrain import errors`` is the module
    ``plugtrain.errors``; ``from plugtrain import hookimpl`` is the package ``plugtrain``."""
    found = []
    for line, name in _imports(path, annotations=annotations):
        if name in MODULES:
            found.append((line, name))
    # "from a import b" also names "a": keep it only where b is not a submodule.
    kept = []
    for line, name in found:
        children = [n for ln, n in found if ln == line and n.startswith(name + ".")]
        if children and all(child in MODULES for child in children):
            continue
        kept.append((line, name))
    return kept


def floor_of(module: str) -> str:
    """The floor of a module of ``core/plugtrain``."""
    parts = module.split(".")
    first = parts[1] if len(parts) > 1 else ""
    if module == "plugtrain" or first in TOP:
        return "top"
    if first in GROUND:
        return "ground"
    if first in MIRRORS:
        return "mirrors"
    if first in (*ROOM_FLOORS, "launching", "authoring"):
        return first
    assert first == "builtin", module
    path = MODULES[module]
    if any(name == "torch" or name.startswith("torch.") for _, name in _imports(path)):
        return "builtin implementations"
    return "builtin plugin"


def test_every_module_has_a_floor() -> None:
    floors = {floor_of(module) for module in MODULES}
    assert floors == set(FLOORS)


def test_no_module_imports_from_a_higher_floor() -> None:
    problems = []
    for module, path in MODULES.items():
        own = FLOORS.index(floor_of(module))
        for line, target in _targets(path):
            if FLOORS.index(floor_of(target)) > own:
                problems.append(
                    f"{path.relative_to(PACKAGE)}:{line} ({floor_of(module)}) imports "
                    f"{target} ({floor_of(target)})"
                )
    assert problems == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_graph(*, annotations: bool = True) -> dict[str, set[str]]:
    """Module -> the plugtrain modules it imports (self-imports left out); the imports under
    ``TYPE_CHECKING`` only with ``annotations``."""
    return {
        module: {
            target for _, target in _targets(path, annotations=annotations) if target != module
        }
        for module, path in MODULES.items()
    }


def test_the_import_graph_has_no_cycle() -> None:
    assert _cycles(import_graph(annotations=False)) == []


def test_the_import_graph_has_no_cycle_counting_annotations() -> None:
    assert _cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("floor", TORCH_FREE)
def test_torch_free_floors_import_no_torch(floor: str) -> None:
    problems = [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for module, path in MODULES.items()
        if floor_of(module) == floor
        for line, name in _imports(path, annotations=False)
        if name == "torch" or name.startswith("torch.")
    ]
    assert problems == []


@pytest.mark.parametrize("module", TORCH_FREE_MODULES)
def test_torch_free_modules_import_no_torch(module: str) -> None:
    path = MODULES[module]
    problems = [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for line, name in _imports(path, annotations=False)
        if name == "torch" or name.startswith("torch.")
    ]
    assert problems == []


PLUGIN_SOURCES = sorted((REPO / "plugins").glob("*/src/**/*.py"))


def test_plugins_import_only_documented_modules() -> None:
    """At run time; an annotation may name a type of another module (``Subcommands``)."""
    assert PLUGIN_SOURCES, "no plugin sources found"
    problems = []
    for path in PLUGIN_SOURCES:
        for line, name in _imports(path, annotations=False):
            if not (name == "plugtrain" or name.startswith("plugtrain.")):
                continue
            owner = name if name in MODULES or name in PUBLIC_PATHS else name.rpartition(".")[0]
            documented = any(
                owner == d or (d != "plugtrain" and owner.startswith(d + ".")) for d in DOCUMENTED
            )
            if not documented:
                problems.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert problems == []


def test_no_plugin_imports_the_training_framework() -> None:
    """Plugins build on the core's contract, not on the Trainer's rooms, annotations included."""
    problems = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in PLUGIN_SOURCES
        for line, name in _imports(path)
        if name == "plugtrain.train" or name.startswith("plugtrain.train.")
    ]
    assert problems == []


def test_the_core_imports_modules_where_they_live() -> None:
    problems = [
        f"{path.relative_to(PACKAGE)}:{line} imports {name}"
        for path in MODULES.values()
        for line, name in _imports(path)
        if any(name == public or name.startswith(public + ".") for public in PUBLIC_PATHS)
    ]
    assert problems == []


def test_every_documented_path_imports_and_is_its_room_module() -> None:
    import importlib

    for name in DOCUMENTED:
        assert importlib.import_module(name).__name__ in (name, PUBLIC_PATHS.get(name))
    for public, home in PUBLIC_PATHS.items():
        module = importlib.import_module(public)
        assert module is importlib.import_module(home)
        assert module.__spec__.name == home
        assert getattr(plugtrain, public.rpartition(".")[2]) is module
        assert public in (*DOCUMENTED, *DOCUMENTED_IN_GUIDES)


def test_every_documented_path_of_a_room_module_has_its_types() -> None:
    """A type checker sees ``plugtrain.schema`` ... through a stub that re-exports its module."""
    for public, home in PUBLIC_PATHS.items():
        stub = PACKAGE / (public.rpartition(".")[2] + ".pyi")
        text = stub.read_text(encoding="utf-8")
        assert f"from {home} import *" in text
        assert f"from {home} import __all__ as __all__" in text
    stubs = {p.stem for p in PACKAGE.glob("*.pyi")}
    assert stubs == {public.rpartition(".")[2] for public in PUBLIC_PATHS}


def test_the_documented_modules_are_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [name for name in DOCUMENTED if f"`{name}`" not in readme]
    assert missing == []


def test_the_check_reads_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    import torch\n    from plugtrain.train import trainer\n")
    assert _imports(module) == [
        (2, "torch"),
        (3, "plugtrain.train"),
        (3, "plugtrain.train.trainer"),
    ]
    assert _targets(module) == [(3, "plugtrain.train.trainer")]


def test_the_check_reads_imports_for_annotations(tmp_path: Path) -> None:
    module = tmp_path / "typed.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import torch\n"
        "    from plugtrain.train.trainer import Trainer\n"
    )
    assert _targets(module) == [(4, "plugtrain.train.trainer")]
    assert _targets(module, annotations=False) == []
    assert (3, "torch") in _imports(module)
    assert (3, "torch") not in _imports(module, annotations=False)


def test_importing_the_lower_floors_loads_no_torch() -> None:
    code = (
        "import sys, plugtrain, plugtrain.config, plugtrain.registry, plugtrain.protocols; "
        "import plugtrain.optim, plugtrain.distributed, plugtrain.launching, plugtrain.strategy; "
        "import plugtrain.hookspecs, plugtrain.scheduler, plugtrain.backend_base; "
        "import plugtrain.sparsity_schema, plugtrain.discovery.attribution; "
        "plugtrain.names('optimizer'); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_public_paths_import() -> None:
    import plugtrain.optim.lr_scheduler as scheduler_module
    import plugtrain.train.trainer as trainer_module

    assert plugtrain.Trainer is trainer_module.Trainer
    assert plugtrain.optim.lr_scheduler is scheduler_module
    assert plugtrain.distributed.__name__ == "plugtrain.distributed"


ROOMS = (
    "components",
    "observability",
    "data",
    "distributed",
    "loop",
    "checkpointing",
    "assembly",
)
"""The rooms of ``plugtrain.train``, from the ground up; the facade ``trainer.py`` stands between
``checkpointing`` and ``assembly``."""

TRAIN = PACKAGE / "train"
FACADE = "plugtrain.train.trainer"
MAX_LINES = 600


def room_of(module: str) -> str | None:
    """``loop`` for ``plugtrain.train.loop.nan_guard``; ``None`` outside the rooms."""
    parts = module.split(".")
    if len(parts) > 2 and parts[:2] == ["plugtrain", "train"] and parts[2] in ROOMS:
        return parts[2]
    return None


def test_train_is_a_facade_and_its_rooms() -> None:
    entries = sorted(p.name for p in TRAIN.iterdir() if p.name != "__pycache__")
    assert len(entries) <= 10, entries
    assert entries == sorted(["__init__.py", "trainer.py", *ROOMS])


def test_a_room_imports_lower_rooms_only_through_their_init() -> None:
    problems = []
    for module, path in MODULES.items():
        room = room_of(module)
        if room is None:
            continue
        for line, target in _targets(path):
            other = room_of(target)
            if other is None or other == room:
                continue
            where = f"{path.relative_to(PACKAGE)}:{line}"
            if ROOMS.index(other) > ROOMS.index(room):
                problems.append(f"{where} ({room}) imports the higher room {other}")
            if target != f"plugtrain.train.{other}":
                problems.append(f"{where} imports {target}, not through plugtrain.train.{other}")
    assert problems == []


def test_only_assembly_imports_the_facade() -> None:
    problems = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for module, path in MODULES.items()
        if module.startswith("plugtrain.train") and room_of(module) != "assembly"
        for line, target in _targets(path)
        if target == FACADE and module != FACADE
    ]
    assert problems == []


def test_the_facade_imports_no_room_above_it() -> None:
    targets = {room_of(target) for _, target in _targets(MODULES[FACADE])}
    assert "assembly" not in targets


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_few_modules_lie_loose_at_the_top() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE, loose


def test_no_room_is_too_big() -> None:
    rooms = {
        folder: sorted(folder.glob("*.py"))
        for folder in [*PACKAGE.rglob("*"), PACKAGE]
        if folder.is_dir() and folder != PACKAGE and (folder / "__init__.py").exists()
    }
    assert len(rooms) > 10
    big = {
        str(folder.relative_to(PACKAGE)): (len(modules), sum(map(_lines, modules)))
        for folder, modules in rooms.items()
        if len(modules) > MAX_ROOM_MODULES or sum(map(_lines, modules)) > MAX_ROOM_LINES
    }
    assert big == {}


def test_no_core_module_is_longer_than_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): count
        for path in MODULES.values()
        if (count := _lines(path)) > MAX_LINES
    }
    assert long == {}


def test_the_room_check_finds_a_side_door(tmp_path: Path) -> None:
    module = tmp_path / "side.py"
    module.write_text("from plugtrain.train.loop.nan_guard import NonFiniteGuard\n")
    assert _targets(module) == [(1, "plugtrain.train.loop.nan_guard")]
    assert room_of("plugtrain.train.loop.nan_guard") == "loop"
    assert room_of("plugtrain.train.trainer") is None
