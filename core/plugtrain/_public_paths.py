"""The documented import paths of the modules that live in the core's rooms.

``import plugtrain.hookspecs`` gives :mod:`plugtrain.contract.hookspecs` itself, and so on for
every path of :data:`PUBLIC_PATHS`: the same module object under both names, so a class has one
identity, and a patch, a pickle or an entry point that names either path finds the same thing.
Nothing is imported before its path is (importing ``plugtrain`` stays cheap).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["PUBLIC_PATHS", "install"]

PUBLIC_PATHS = {
    "plugtrain.hookspecs": "plugtrain.contract.hookspecs",
    "plugtrain.protocols": "plugtrain.contract.protocols",
    "plugtrain.strategy": "plugtrain.contract.strategy",
    "plugtrain.schema": "plugtrain.registry.schema",
    "plugtrain.backend_base": "plugtrain.bases.backend",
    "plugtrain.scheduler": "plugtrain.bases.scheduler",
    "plugtrain.curve": "plugtrain.bases.curve",
    "plugtrain.tags": "plugtrain.bases.tags",
    "plugtrain.hyperparams": "plugtrain.bases.hyperparams",
    "plugtrain.sparsity_schema": "plugtrain.bases.sparsity",
    "plugtrain.compat": "plugtrain.discovery.compat",
}
"""Documented path -> the module it names."""


class _RoomLoader(importlib.abc.Loader):
    """Loads a documented path as the module of its room, which keeps its own spec."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just given the module the documented path's spec; the module
        # was executed under its own and keeps it.
        module.__spec__ = self._spec


class _PublicPathFinder(importlib.abc.MetaPathFinder):
    """Finds the paths of :data:`PUBLIC_PATHS`, and nothing else."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        room_module = PUBLIC_PATHS.get(fullname)
        if room_module is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _RoomLoader(room_module))


def install() -> None:
    """Make the documented paths importable (once per process)."""
    if not any(isinstance(finder, _PublicPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(_PublicPathFinder())
