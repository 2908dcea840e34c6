"""A plugin registered as an object (not found through an import string) passes every check."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from plugtrain.registry import PluginList
from plugtrain.testing import check_plugin_contract

SOURCE = '''
"""An in-memory plugin: a class with hook implementations, registered as an object."""
{torch}
import attrs

from plugtrain import hookimpl
from plugtrain.schema import arg


@attrs.frozen
class WrongNetArgs:
    """A linear model (for the test)."""

    width: int = arg(2, gt=0)


class Wrong:
    @hookimpl
    def plugtrain_register_models(self, registry):
        registry.register("WrongNet", "{module}:build", schema=WrongNetArgs)


def build(width: int = 2):
    import torch

    return torch.nn.Linear(width, width)
'''


def _load(tmp_path: Path, name: str, *, torch_at_top: bool = False):
    """Import a module from a file that is not on sys.path (as tests often define plugins)."""
    path = tmp_path / f"{name}.py"
    text = SOURCE.format(module=name, torch="import torch\n" if torch_at_top else "")
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cleanup():
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("memplug_"):
            del sys.modules[name]


def test_an_object_plugin_passes_the_contract_check(tmp_path, make_registry, cleanup):
    module = _load(tmp_path, "memplug_clean")
    registry = make_registry(module.Wrong())
    (info,) = [p for p in registry.plugins() if p.name == "Wrong"]
    assert info.module == "memplug_clean"  # the module holding the hooks, not the class name
    # before: "importing ['Wrong'] failed: ['ModuleNotFoundError: No module named 'Wrong'']"
    assert check_plugin_contract("Wrong", registry) == []


def test_the_torch_free_check_still_sees_torch(tmp_path, make_registry, cleanup):
    module = _load(tmp_path, "memplug_torch", torch_at_top=True)
    registry = make_registry(module.Wrong())
    (problem,) = check_plugin_contract("Wrong", registry)
    assert "importing ['memplug_torch'] imports torch" in problem
    assert check_plugin_contract("Wrong", registry, torch_free=False) == []


def test_registry_queries_are_methods(make_registry):
    registry = make_registry(builtin=True)
    listed = registry.plugins()
    assert type(listed) is list
    assert "builtin" in [p.name for p in listed if p.status == "loaded"]
    # the 0.1 spelling, the attribute read as a list, still works
    assert isinstance(registry.plugins, PluginList)
    assert [p.name for p in registry.plugins] == [p.name for p in listed]
    assert registry.names("model") == ["MLP"]
