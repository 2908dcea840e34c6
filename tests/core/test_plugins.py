"""Plugin loading: isolation of broken plugins, strict mode, blocking, explicit plugins."""

from __future__ import annotations

import sys
import types

import attrs
import pytest

from plugtrain import hookimpl
from plugtrain.discovery.loading import PluginSettings, build_registry, plugin_summary
from plugtrain.errors import PluginLoadError
from plugtrain.schema import arg


@attrs.frozen
class NoArgs:
    """Nothing to configure."""


class Good:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("GoodOpt", "collections:deque", schema=NoArgs)


class RaisesInHook:
    @hookimpl
    def plugtrain_register_schedulers(self, registry):
        registry.register("Half", "collections:deque", schema=NoArgs)
        raise RuntimeError("boom")


class ReturnsGarbage:
    @hookimpl
    def plugtrain_register_backends(self, registry):
        return ["CPU"]


class Misspelt:
    @hookimpl
    def plugtrain_register_optimisers(self, registry):
        """A typo in the hook name."""


def _settings(**changes):
    return PluginSettings(autoload=False, blocked=frozenset({"builtin"}), **changes)


def _info(registry, name):
    (info,) = [p for p in registry.plugins() if p.name == name]
    return info


def _build(*named, **changes):
    return build_registry(_settings(**changes), extra=named)


def test_a_plugin_whose_hook_raises_is_skipped_and_reported(capsys):
    registry = _build(("good", Good()), ("raiser", RaisesInHook()))
    assert registry.names("optimizer") == ["GoodOpt"]
    assert registry.names("scheduler") == []  # its partial registration is rolled back
    (failed,) = [p for p in registry.plugins() if p.status == "failed"]
    assert failed.name == "raiser"
    assert "RuntimeError: boom" in failed.error
    err = capsys.readouterr().err
    assert "plugin 'raiser'" in err
    assert "boom" in err


def test_a_failure_is_reported_once_per_process(capsys):
    _build(("raiser_once", RaisesInHook()))
    _build(("raiser_once", RaisesInHook()))
    assert capsys.readouterr().err.count("plugin 'raiser_once'") == 1


def test_a_hook_returning_a_value_is_a_plugin_failure():
    registry = _build(("garbage", ReturnsGarbage()))
    info = _info(registry, "garbage")
    assert info.status == "failed"
    assert "returned ['CPU']" in info.error


def test_an_unknown_hook_name_is_reported_with_a_suggestion():
    registry = _build(("typo", Misspelt()))
    info = _info(registry, "typo")
    assert info.status == "failed"
    assert "unknown hook 'plugtrain_register_optimisers'" in info.error
    assert "plugtrain_register_optimizers" in info.error


def test_strict_mode_turns_a_failure_into_an_error():
    with pytest.raises(PluginLoadError, match="boom"):
        _build(("raiser", RaisesInHook()), strict=True)


def test_strict_mode_comes_from_the_environment():
    settings = PluginSettings.from_env(environ={"PLUGTRAIN_STRICT_PLUGINS": "1"})
    assert settings.strict


def test_environment_and_p_no_block_plugins():
    settings = PluginSettings.from_env(
        ["no:schedulers", "my.module"], environ={"PLUGTRAIN_BLOCK_PLUGINS": "a, b"}
    )
    assert settings.blocked == {"a", "b", "schedulers"}
    assert settings.explicit == ("my.module",)


def test_autoload_switch_comes_from_the_environment():
    assert not PluginSettings.from_env(environ={"PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD": "1"}).autoload
    assert PluginSettings.from_env(environ={}).autoload


@pytest.fixture
def local_plugin_module(monkeypatch):
    module = types.ModuleType("plugtrain_test_local_plugin")

    @hookimpl
    def plugtrain_register_models(registry):
        registry.register("LocalNet", "collections:deque", schema=NoArgs)

    module.plugtrain_register_models = plugtrain_register_models
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_a_local_module_is_loaded_only_when_named(local_plugin_module):
    assert "LocalNet" not in build_registry(_settings()).names("model")
    registry = build_registry(_settings(explicit=(local_plugin_module,)))
    assert registry.names("model") == ["LocalNet"]
    info = _info(registry, local_plugin_module)
    assert info.distribution is None
    assert info.provider == f"{local_plugin_module} (local)"


def test_a_named_module_that_cannot_import_is_reported():
    registry = build_registry(_settings(explicit=("no_such_plugin_module_xyz",)))
    info = _info(registry, "no_such_plugin_module_xyz")
    assert info.status == "failed"
    assert "ModuleNotFoundError" in info.error


def test_installed_plugins_are_loaded_and_listed(installed_registry):
    rows = {row["name"]: row for row in plugin_summary(installed_registry)}
    assert rows["builtin"]["status"] == "loaded"
    assert rows["builtin"]["distribution"] == "plugtrain"
    assert "MLP" in rows["builtin"]["components"]["model"]


def test_disabling_autoload_loads_only_named_entry_points():
    registry = build_registry(PluginSettings(autoload=False, explicit=("optimizers",)))
    statuses = {p.name: p.status for p in registry.plugins()}
    if "optimizers" not in statuses:
        pytest.skip("plugtrain-optimizers is not installed")
    assert statuses["optimizers"] == "loaded"
    assert all(s == "not loaded" for n, s in statuses.items() if n not in {"optimizers", "builtin"})
    assert registry.names("scheduler") == []


def test_a_blocked_entry_point_is_listed_as_blocked():
    registry = build_registry(PluginSettings(blocked=frozenset({"builtin"})))
    (builtin,) = [p for p in registry.plugins() if p.name == "builtin"]
    assert builtin.status == "blocked"
    assert [c.name for c in registry.components("model") if c.plugin.name == "builtin"] == []


def test_default_arguments_of_a_schema_field_are_copied_per_instance():
    @attrs.frozen
    class WithList:
        """Has a list default."""

        items: list = arg([1, 2])

    assert WithList().items == [1, 2]
    assert WithList().items is not WithList().items
