"""Import paths that moved, kept working: ``plugtrain.trainer`` is ``plugtrain.train.trainer``.

The training framework moved to :mod:`plugtrain.train` and the authoring tools to
:mod:`plugtrain.authoring`. A meta-path finder answers the old module names with the very module
objects of the new ones (so classes keep one identity and ``isinstance`` holds across both
spellings) without putting a shim file back at the top level.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

MOVED: dict[str, str] = {
    "plugtrain.trainer": "plugtrain.train.trainer",
    "plugtrain.run": "plugtrain.train.run",
    "plugtrain.launch": "plugtrain.train.launch",
    "plugtrain.backends": "plugtrain.train.backends",
    "plugtrain.distributed": "plugtrain.train.distributed",
    "plugtrain.checkpoint": "plugtrain.train.checkpoint",
    "plugtrain.metrics": "plugtrain.train.metrics",
    "plugtrain.params": "plugtrain.train.params",
    "plugtrain.optim": "plugtrain.train.optim",
    "plugtrain.jsonschema": "plugtrain.authoring.jsonschema",
    "plugtrain.reference": "plugtrain.authoring.reference",
    "plugtrain.schedule_plot": "plugtrain.authoring.schedule_plot",
}
"""Old module name -> its home now (submodules of a moved package move with it)."""


def new_name(fullname: str) -> str | None:
    """Where the module once called ``fullname`` lives now; ``None`` if it did not move."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.own_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.own_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the shared module: give it back its own.
        module.__spec__ = self.own_spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        moved_to = new_name(fullname)
        if moved_to is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(moved_to))


def install() -> None:
    """Make the old import paths resolve (idempotent)."""
    # First in line: the path finder would otherwise load a second copy of a moved package's
    # submodules under the old name.
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())
