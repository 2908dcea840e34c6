"""The hook specifications are the plugin author's contract: each is documented and tested."""

from __future__ import annotations

import inspect

import attrs
import pytest

from plugtrain import hookimpl, hookspecs
from plugtrain.registry.kinds import KINDS

HOOKS = sorted(name for name in dir(hookspecs) if name.startswith("plugtrain_"))


def test_every_kind_has_a_hook_and_every_hook_a_kind():
    assert sorted(kind.hook for kind in KINDS.values()) == HOOKS


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_documents_each_argument_and_its_return(name):
    function = getattr(hookspecs, name)
    doc = inspect.getdoc(function)
    assert doc, f"{name} has no docstring"
    for parameter in inspect.signature(function).parameters:
        assert f":param {parameter}:" in doc
    assert ":returns:" in doc
    assert "called once" in doc  # when it is called


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_has_a_test(name):
    assert f"test_hook_{name}" in globals()


@attrs.frozen
class _Args:
    """A component for hook tests."""


def _registry_with(make_registry, hook_name: str):
    plugin = type(
        "P",
        (),
        {
            hook_name: hookimpl(
                lambda self, registry: registry.register("Thing", "collections:deque", schema=_Args)
            )
        },
    )
    return make_registry(plugin())


def _kind_of(hook_name: str) -> str:
    (kind,) = [k.name for k in KINDS.values() if k.hook == hook_name]
    return kind


def _check_hook(make_registry, hook_name: str) -> None:
    registry = _registry_with(make_registry, hook_name)
    kind = _kind_of(hook_name)
    assert registry.names(kind) == ["Thing"]
    other_kinds = [k for k in KINDS if k != kind]
    assert all(registry.names(k) == [] for k in other_kinds)


def test_hook_plugtrain_register_optimizers(make_registry):
    _check_hook(make_registry, "plugtrain_register_optimizers")


def test_hook_plugtrain_register_schedulers(make_registry):
    _check_hook(make_registry, "plugtrain_register_schedulers")


def test_hook_plugtrain_register_backends(make_registry):
    _check_hook(make_registry, "plugtrain_register_backends")


def test_hook_plugtrain_register_models(make_registry):
    _check_hook(make_registry, "plugtrain_register_models")


def test_hook_plugtrain_register_dataloaders(make_registry):
    _check_hook(make_registry, "plugtrain_register_dataloaders")


def test_hook_plugtrain_register_callbacks(make_registry):
    _check_hook(make_registry, "plugtrain_register_callbacks")


def test_hook_plugtrain_register_loggers(make_registry):
    _check_hook(make_registry, "plugtrain_register_loggers")


def test_hook_plugtrain_register_sparsity(make_registry):
    _check_hook(make_registry, "plugtrain_register_sparsity")


def test_hook_plugtrain_register_sparsity_schedules(make_registry):
    _check_hook(make_registry, "plugtrain_register_sparsity_schedules")


def test_hook_plugtrain_register_checkpoint_converters(make_registry):
    _check_hook(make_registry, "plugtrain_register_checkpoint_converters")
