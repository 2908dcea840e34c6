"""Name resolution: exact, case-insensitive, did-you-mean, conflicts and the way to choose."""

from __future__ import annotations

import attrs
import pytest

import plugtrain
from plugtrain import hookimpl
from plugtrain.errors import DuplicateNameError, UnknownNameError
from plugtrain.schema import arg


@attrs.frozen
class FakeArgs:
    """A fake optimizer for registry tests."""

    lr: float = arg(0.1, ge=0)


class ProviderA:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("Fancy", "collections:OrderedDict", schema=FakeArgs)
        registry.register("Shared", "collections:Counter", schema=FakeArgs, aliases=["Common"])


class ProviderB:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("Shared", "collections:deque", schema=FakeArgs)


class CaseTwins:
    @hookimpl
    def plugtrain_register_schedulers(self, registry):
        registry.register("StepLR", "collections:deque", schema=FakeArgs)
        registry.register("STEPLR", "collections:Counter", schema=FakeArgs)


def test_exact_name_resolves_to_the_implementation(make_registry):
    registry = make_registry(ProviderA())
    import collections

    assert registry.resolve("optimizer", "Fancy") is collections.OrderedDict


def test_unique_case_insensitive_match_resolves(make_registry):
    registry = make_registry(ProviderA())
    assert registry.lookup("optimizer", "fancy").name == "Fancy"
    assert registry.lookup("optimizer", "FANCY").name == "Fancy"


def test_alias_resolves_to_its_component(make_registry):
    registry = make_registry(ProviderA())
    assert registry.lookup("optimizer", "Common").name == "Shared"
    assert registry.names("optimizer") == ["Fancy", "Shared"]


def test_unknown_name_offers_close_matches_and_providers(make_registry):
    registry = make_registry(ProviderA())
    with pytest.raises(UnknownNameError) as info:
        registry.lookup("optimizer", "Fanci")
    message = str(info.value)
    assert "Unknown optimizer 'Fanci'" in message
    assert "Did you mean 'Fancy'?" in message
    assert "ProviderA (local)" in message


def test_unknown_name_is_a_lookup_error(make_registry):
    registry = make_registry(ProviderA())
    with pytest.raises(LookupError):
        registry.resolve("optimizer", "Nope")


def test_case_insensitive_match_must_be_unique(make_registry):
    registry = make_registry(CaseTwins())
    assert registry.lookup("scheduler", "StepLR").target == "collections:deque"
    with pytest.raises(UnknownNameError, match="ambiguous"):
        registry.lookup("scheduler", "steplr")


def test_unknown_kind_is_reported_with_a_suggestion(make_registry):
    registry = make_registry(ProviderA())
    with pytest.raises(UnknownNameError, match="Did you mean 'optimizer'"):
        registry.names("optimiser")


def test_two_providers_of_one_name_is_an_error_naming_both(make_registry):
    registry = make_registry(ProviderA(), ProviderB())
    with pytest.raises(DuplicateNameError) as info:
        registry.lookup("optimizer", "Shared")
    message = str(info.value)
    assert "ProviderA:Shared" in message
    assert "ProviderB:Shared" in message
    assert "-p no:ProviderA" in message


def test_a_qualified_name_chooses_the_provider(make_registry):
    registry = make_registry(ProviderA(), ProviderB())
    import collections

    assert registry.resolve("optimizer", "ProviderA:Shared") is collections.Counter
    assert registry.resolve("optimizer", "ProviderB:Shared") is collections.deque


def test_a_qualified_name_with_a_wrong_provider_says_who_provides_it(make_registry):
    registry = make_registry(ProviderA(), ProviderB())
    with pytest.raises(UnknownNameError, match="No plugin 'acme' provides optimizer 'Shared'"):
        registry.lookup("optimizer", "acme:Shared")


def test_blocking_one_provider_resolves_the_conflict():
    from plugtrain.discovery.loading import PluginSettings, build_registry

    settings = PluginSettings(autoload=False, blocked=frozenset({"builtin", "ProviderB"}))
    registry = build_registry(
        settings, extra=[("ProviderA", ProviderA()), ("ProviderB", ProviderB())]
    )
    assert registry.lookup("optimizer", "Shared").target == "collections:Counter"


def test_a_plugin_registering_one_name_twice_fails(make_registry):
    class Twice:
        @hookimpl
        def plugtrain_register_optimizers(self, registry):
            registry.register("X", "collections:deque", schema=FakeArgs)
            registry.register("X", "collections:deque", schema=FakeArgs)

    with pytest.raises(plugtrain.PluginLoadError, match="registered twice"):
        make_registry(Twice())


@pytest.mark.parametrize(
    ("name", "target", "problem"),
    [
        ("Bad Name ", "collections:deque", "component names"),
        ("a:b", "collections:deque", "component names"),
        ("Ok", "collections.deque", "target must look like"),
    ],
)
def test_register_rejects_malformed_declarations(make_registry, name, target, problem):
    class Malformed:
        @hookimpl
        def plugtrain_register_optimizers(self, registry):
            registry.register(name, target, schema=FakeArgs)

    with pytest.raises(plugtrain.PluginLoadError, match=problem):
        make_registry(Malformed())


def test_schema_must_be_an_attrs_class(make_registry):
    class NotAttrs:
        @hookimpl
        def plugtrain_register_optimizers(self, registry):
            registry.register("X", "collections:deque", schema=dict)

    with pytest.raises(plugtrain.PluginLoadError, match="attrs class"):
        make_registry(NotAttrs())


def test_describe_gives_provider_summary_and_arguments(make_registry):
    registry = make_registry(ProviderA())
    info = registry.describe("optimizer", "Fancy")
    assert info.summary == "A fake optimizer for registry tests."
    assert info.plugin == "ProviderA"
    (lr,) = info.arguments
    assert (lr.name, lr.type, lr.default, lr.constraint) == ("lr", "float", 0.1, ">= 0")


def test_a_component_whose_target_is_wrong_fails_at_resolution_naming_its_provider(make_registry):
    class Broken:
        @hookimpl
        def plugtrain_register_optimizers(self, registry):
            registry.register("Ghost", "no_such_module_xyz:Ghost", schema=FakeArgs)

    registry = make_registry(Broken())
    with pytest.raises(plugtrain.PluginLoadError, match="no_such_module_xyz"):
        registry.resolve("optimizer", "Ghost")


def test_the_process_registry_serves_the_public_functions(register_plugin):
    register_plugin(ProviderA(), name="provider_a")
    assert "Fancy" in plugtrain.names("optimizer")
    assert plugtrain.describe("optimizer", "fancy").name == "Fancy"
    import collections

    assert plugtrain.resolve("optimizer", "Fancy") is collections.OrderedDict


def test_plugtrain_optim_resolves_attributes_through_the_registry(register_plugin):
    register_plugin(ProviderA(), name="provider_a")
    import collections

    assert plugtrain.optim.Fancy is collections.OrderedDict
    assert not hasattr(plugtrain.optim, "NoSuchOptimizer")


class Bridge:
    """A bridge to another library: its names give way to other plugins' (``defer=True``)."""

    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("Shared", "collections:ChainMap", schema=FakeArgs, defer=True)
        registry.register("Bridged", "collections:ChainMap", schema=FakeArgs, defer=True)
        registry.not_installed(["Absent"], "otherlib")


class OtherBridge:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("Bridged", "collections:UserDict", schema=FakeArgs, defer=True)


def test_a_deferring_component_gives_way_to_other_providers_of_its_name(make_registry):
    import collections

    registry = make_registry(ProviderA(), Bridge())
    assert registry.resolve("optimizer", "Shared") is collections.Counter
    assert registry.resolve("optimizer", "shared") is collections.Counter
    assert registry.resolve("optimizer", "Bridge:Shared") is collections.ChainMap
    assert registry.resolve("optimizer", "Bridged") is collections.ChainMap
    assert registry.resolve("optimizer", "bridged") is collections.ChainMap
    assert registry.names("optimizer") == ["Bridged", "Fancy", "Shared"]


def test_two_deferring_providers_of_a_name_are_a_conflict_naming_the_plugins(make_registry):
    registry = make_registry(Bridge(), OtherBridge())
    with pytest.raises(DuplicateNameError, match=r"'Bridge:Bridged'.*'OtherBridge:Bridged'"):
        registry.lookup("optimizer", "Bridged")
    assert registry.lookup("optimizer", "OtherBridge:Bridged").plugin.name == "OtherBridge"


def test_an_unknown_name_of_a_library_that_is_not_installed_says_what_to_install(make_registry):
    registry = make_registry(ProviderA(), Bridge())
    with pytest.raises(UnknownNameError) as error:
        registry.lookup("optimizer", "absent")
    assert "'absent' is an optimizer of otherlib, which is not installed" in str(error.value)
    assert "(pip install otherlib)" in str(error.value)


class CaseBridge:
    @hookimpl
    def plugtrain_register_optimizers(self, registry):
        registry.register("FANCY", "collections:ChainMap", schema=FakeArgs, defer=True)


def test_a_deferring_name_gives_way_to_another_plugins_name_in_another_case(make_registry):
    import collections

    registry = make_registry(ProviderA(), CaseBridge())
    assert registry.resolve("optimizer", "FANCY") is collections.OrderedDict
    assert registry.resolve("optimizer", "CaseBridge:FANCY") is collections.ChainMap
    assert registry.resolve("optimizer", "CaseBridge:fancy") is collections.ChainMap
