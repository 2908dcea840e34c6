"""The documented paths of modules that live in the core's rooms: one module under two names."""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import sys

import pytest

import plugtrain
from plugtrain._public_paths import PUBLIC_PATHS, install


@pytest.mark.parametrize(("public", "home"), sorted(PUBLIC_PATHS.items()))
def test_a_documented_path_is_its_room_module(public: str, home: str) -> None:
    sys.modules.pop(public, None)
    module = importlib.import_module(public)
    assert module is importlib.import_module(home)
    assert module.__name__ == home
    assert module.__spec__ is not None
    assert module.__spec__.name == home
    assert sys.modules[public] is module
    assert importlib.util.find_spec(public) is not None


def test_from_the_package_import_a_documented_name() -> None:
    sys.modules.pop("plugtrain.hookspecs", None)
    vars(plugtrain).pop("hookspecs", None)
    from plugtrain import hookspecs

    assert hookspecs is importlib.import_module("plugtrain.contract.hookspecs")
    assert plugtrain.scheduler is importlib.import_module("plugtrain.bases.scheduler")


def test_a_class_has_one_identity_under_both_paths() -> None:
    from plugtrain.bases.scheduler import Scheduler as ByHome
    from plugtrain.scheduler import Scheduler as ByPath

    assert ByPath is ByHome
    assert ByHome.__module__ == "plugtrain.bases.scheduler"


@pytest.mark.parametrize("module", ["plugtrain.curve", "plugtrain.bases.curve"])
def test_a_pickle_naming_either_path_loads_the_same_class(module: str) -> None:
    from plugtrain.bases.curve import Curve

    payload = f"c{module}\nCurve\n.".encode()
    assert pickle.loads(payload) is Curve


def test_a_patch_through_a_documented_path_reaches_the_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import plugtrain.bases.tags as room

    marker = object()
    monkeypatch.setattr("plugtrain.tags.select_param_groups", marker)
    assert room.select_param_groups is marker


def test_other_paths_are_not_found() -> None:
    assert importlib.util.find_spec("plugtrain.no_such_module") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("plugtrain.plugins")


def test_installing_twice_adds_one_finder() -> None:
    before = len(sys.meta_path)
    install()
    install()
    assert len(sys.meta_path) == before
