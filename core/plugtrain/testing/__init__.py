"""A pytest plugin for plugin authors (opt-in: ``pytest_plugins = ["plugtrain.testing"]``).

Fixtures:

- ``plugin_manager``: a fresh pluggy manager with plugtrain's hookspecs and no plugin.
- ``make_registry``: builds an isolated :class:`~plugtrain.registry.Registry` from the plugin
  objects you pass (no entry points, no built-ins unless asked).
- ``installed_registry``: a registry of every installed plugin, as users get it.
- ``fresh_backend``: forgets the process's backend type around the test.
- ``register_plugin``: adds an in-memory plugin to the process-wide registry (what
  ``plugtrain.resolve`` uses) for one test, and removes it afterwards.

Helpers: :func:`assert_plugin_installed` (the first test of any plugin) and
:func:`check_plugin_contract` / :func:`assert_plugin_contract`: every component of a plugin
resolves (by ``distribution:Name``), imports, and its schema agrees with its constructor's
signature; the plugin module and schemas import no torch; states survive a checkpoint
(``weights_only=True``) and resume exactly. :func:`isolated_registry` builds a registry of only
the plugins given.

Run files: :func:`trainer_run` builds a run file's mapping, :func:`write_run_file` writes it,
:func:`run_plugtrain` runs a command line on it (in this process or a new one) and returns a
:class:`PlugtrainResult` (exit status, stdout, stderr).

The behavioural conformance kit: :func:`check_optimizer`, :func:`check_scheduler`,
:func:`check_callback`, :func:`check_logger`, :func:`check_backend`, :func:`check_model`,
:func:`check_dataloader` and :func:`check_sparsity`
take a component's class (or factory) and its arguments, try each property of that kind
(``OPTIMIZER_PROPERTIES`` ...) and raise :class:`ConformanceError` naming every property that
failed and the values involved; ``skip={"property": "reason"}`` opts out of one, with the
reason kept in the returned :class:`ConformanceReport`.

Importing this module imports neither torch nor pytest (the kit is imported on first use).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from plugtrain.discovery import loading as plugins
from plugtrain.registry.components import Component, Registry
from plugtrain.registry.kinds import KINDS
from plugtrain.registry.schema import REQUIRED, arg_infos
from plugtrain.testing.conformance import ConformanceError, ConformanceReport, PropertyResult
from plugtrain.testing.run_files import (
    PlugtrainResult,
    run_plugtrain,
    trainer_run,
    write_run_file,
)

if TYPE_CHECKING:
    import pluggy

    from plugtrain.testing.optimizer_kit import OPTIMIZER_PROPERTIES, check_optimizer
    from plugtrain.testing.runtime_kit import (
        BACKEND_PROPERTIES,
        CALLBACK_PROPERTIES,
        DATALOADER_PROPERTIES,
        LOGGER_PROPERTIES,
        MODEL_PROPERTIES,
        check_backend,
        check_callback,
        check_dataloader,
        check_logger,
        check_model,
    )
    from plugtrain.testing.scheduler_kit import SCHEDULER_PROPERTIES, check_scheduler
    from plugtrain.testing.sparsity_kit import SPARSITY_PROPERTIES, check_sparsity

__all__ = [
    "BACKEND_PROPERTIES",
    "CALLBACK_PROPERTIES",
    "DATALOADER_PROPERTIES",
    "LOGGER_PROPERTIES",
    "MODEL_PROPERTIES",
    "OPTIMIZER_PROPERTIES",
    "SCHEDULER_PROPERTIES",
    "SPARSITY_PROPERTIES",
    "ConformanceError",
    "ConformanceReport",
    "PlugtrainResult",
    "PropertyResult",
    "assert_plugin_contract",
    "assert_plugin_installed",
    "check_backend",
    "check_callback",
    "check_component_contract",
    "check_dataloader",
    "check_logger",
    "check_model",
    "check_optimizer",
    "check_plugin_contract",
    "check_scheduler",
    "check_sparsity",
    "distribution_names",
    "fresh_backend",
    "installed_registry",
    "isolated_registry",
    "make_registry",
    "plugin_manager",
    "register_plugin",
    "run_plugtrain",
    "trainer_run",
    "write_run_file",
]

try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]


# The conformance kit imports torch: loaded on first use, so that importing this module does not.
_KIT = {
    "check_optimizer": "optimizer_kit",
    "OPTIMIZER_PROPERTIES": "optimizer_kit",
    "check_scheduler": "scheduler_kit",
    "SCHEDULER_PROPERTIES": "scheduler_kit",
    "check_sparsity": "sparsity_kit",
    "SPARSITY_PROPERTIES": "sparsity_kit",
    **dict.fromkeys(
        (
            "check_backend",
            "check_callback",
            "check_logger",
            "check_model",
            "check_dataloader",
            "BACKEND_PROPERTIES",
            "CALLBACK_PROPERTIES",
            "LOGGER_PROPERTIES",
            "MODEL_PROPERTIES",
            "DATALOADER_PROPERTIES",
        ),
        "runtime_kit",
    ),
}


def __getattr__(name: str) -> Any:
    module = _KIT.get(name)
    if module is None:
        message = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(message)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


# -- helpers ---------------------------------------------------------------------------------


def isolated_registry(*plugins_: object, builtin: bool = False, strict: bool = True) -> Registry:
    """A registry holding only ``plugins_`` (objects or modules with hookimpls).

    :param builtin: also load the core's built-in plugin (models and data loaders).
    :param strict: raise on a plugin failure instead of reporting it.
    """
    settings = plugins.PluginSettings(
        autoload=False,
        strict=strict,
        blocked=frozenset() if builtin else frozenset({plugins.BUILTIN_PLUGIN}),
    )
    extra = [(getattr(p, "__name__", type(p).__name__), p) for p in plugins_]
    return plugins.build_registry(settings, extra=extra)


def distribution_names(distribution: str, kind: str, registry: Registry | None = None) -> list[str]:
    """The sorted names of ``kind`` that ``distribution`` registers.

    What a distribution's own tests iterate over: ``plugtrain.names(kind)`` also holds every
    other installed plugin's names (``plugtrain-bridges`` adds a hundred optimizers).
    """
    registry = registry or plugins.get_registry()
    return sorted(
        {c.name for c in registry.components(kind) if c.plugin.distribution == distribution}
    )


def assert_plugin_installed(distribution: str, registry: Registry | None = None) -> None:
    """Fail unless ``distribution`` is installed and its plugin loaded without error."""
    registry = registry or plugins.get_registry()
    mine = [p for p in registry.plugins() if p.distribution == distribution]
    if not mine:
        found = sorted({p.distribution or p.name for p in registry.plugins()})
        message = f"no plugin from distribution {distribution!r} is installed; found: {found}"
        raise AssertionError(message)
    failed = [p for p in mine if p.status != "loaded"]
    if failed:
        message = f"plugin(s) of {distribution!r} not loaded: " + "; ".join(
            f"{p.name}: {p.status} {p.error or ''}" for p in failed
        )
        raise AssertionError(message)


def check_component_contract(component: Component) -> list[str]:
    """Problems with one component: it must import and its schema must match its signature."""
    where = f"{component.kind} {component.name!r} ({component.target})"
    try:
        schema = component.schema_class
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return [f"{where}: schema {component.schema!r} cannot be imported: {exc!r}"]
    if not attrs.has(schema):
        return [f"{where}: schema {schema!r} is not an attrs class"]
    try:
        component.describe()
    except Exception as exc:  # noqa: BLE001
        return [f"{where}: cannot be described: {exc!r}"]
    try:
        implementation = component.load()
    except Exception as exc:  # noqa: BLE001
        return [f"{where}: {exc}"]
    if component.kind == "checkpoint_converter":  # a declaration, not a constructor
        from plugtrain.conversion.declaration import CheckpointConverter

        if isinstance(implementation, CheckpointConverter):
            return []
        return [f"{where}: is a {type(implementation).__name__}, not a CheckpointConverter"]
    return [f"{where}: {p}" for p in _signature_problems(component, implementation, schema)]


def _signature_problems(component: Component, implementation: Any, schema: type) -> list[str]:
    try:
        signature = inspect.signature(implementation)
    except (TypeError, ValueError) as exc:
        return [f"has no inspectable signature: {exc}"]
    fields = {f.name: f for f in attrs.fields(schema)}
    has_aliases = any(
        f.metadata.get("plugtrain") and f.metadata["plugtrain"].aliases for f in fields.values()
    )
    problems: list[str] = []
    context = KINDS[component.kind].context_args
    leading = 0
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            if not has_aliases:
                problems.append(
                    f"accepts **{parameter.name} but its schema declares no aliases; "
                    "name every argument so typos are caught"
                )
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            problems.append(f"accepts *{parameter.name}; arguments must be named in the schema")
            continue
        if parameter.name not in fields:
            if leading < len(context) and parameter.default is parameter.empty:
                leading += 1
                continue
            problems.append(f"parameter {parameter.name!r} is missing from the schema")
            continue
        field = fields[parameter.name]
        schema_required = field.default is attrs.NOTHING
        param_required = parameter.default is parameter.empty or parameter.default is REQUIRED
        if schema_required != param_required:
            problems.append(
                f"argument {parameter.name!r} is {'required' if schema_required else 'optional'} "
                f"in the schema but {'required' if param_required else 'optional'} in the signature"
            )
        elif not schema_required:
            schema_default = field.default
            if isinstance(schema_default, attrs.Factory):  # type: ignore[arg-type]
                schema_default = schema_default.factory()
            if not _same_default(schema_default, parameter.default):
                problems.append(
                    f"argument {parameter.name!r} defaults to {parameter.default!r} in the "
                    f"signature but {schema_default!r} in the schema"
                )
    named = set(signature.parameters)
    for name in fields:
        if name not in named:
            problems.append(f"schema argument {name!r} is not a parameter of the constructor")
    return problems


def _same_default(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_default(x, y) for x, y in zip(a, b, strict=True))
    try:
        return (bool(a == b) and type(a) is type(b)) or (
            isinstance(a, int | float)
            and isinstance(b, int | float)
            and float(a) == float(b)
            and not isinstance(a, bool)
            and not isinstance(b, bool)
        )
    except Exception:  # noqa: BLE001 - incomparable defaults differ
        return False


def _torch_free_problems(modules: list[str]) -> list[str]:
    """Import ``modules`` in a fresh interpreter and report whether torch came with them.

    The interpreter gets this process's ``sys.path``; a module imported here that it still
    cannot find by name (an in-memory plugin's module loaded from a file, a test module under
    ``--import-mode=importlib``) is loaded from its file. A module without a file (defined in
    ``__main__`` or built at run time) cannot be imported elsewhere and is not checked.
    """
    items = []
    for name in modules:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) if module is not None else None
        if module is not None and (file is None or name == "__main__"):
            continue
        items.append((name, file))
    if not items:
        return []
    script = (
        "import importlib, importlib.util, json, sys\n"
        f"sys.path[:0] = {[p for p in sys.path if p]!r}\n"
        f"for name, file in {items!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        if file is None:\n"
        "            raise\n"
        "        spec = importlib.util.spec_from_file_location(name, file)\n"
        "        module = importlib.util.module_from_spec(spec)\n"
        "        sys.modules[name] = module\n"
        "        spec.loader.exec_module(module)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    names = [name for name, _ in items]
    if done.returncode != 0:
        return [f"importing {names} failed: {done.stderr.strip().splitlines()[-1:]}"]
    if json.loads(done.stdout.strip().splitlines()[-1]):
        return [
            f"importing {names} imports torch; plugin and schema modules must not (an in-memory "
            "plugin defined in a test module that imports torch: pass torch_free=False)"
        ]
    return []


def _owner_name(component: Component) -> str:
    return component.plugin.distribution or component.plugin.name


def _round_trip(
    component: Component, arguments: Mapping[str, Mapping[str, Any]] | None
) -> list[str]:
    """The checkpoint round trip of one component, when it can be built (see below)."""
    if component.kind == "checkpoint_converter":
        return []  # a declaration: nothing is built
    given = (arguments or {}).get(component.name)
    if given is None:
        if any(info.required for info in arg_infos(component.schema_class)):
            return []  # needs arguments nobody gave
        given = {}
    try:
        from plugtrain.train.checkpointing import round_trip_problems
    except ImportError:  # no torch: nothing can be built
        return []
    try:
        implementation = component.load()
    except Exception:  # noqa: BLE001 - already reported by check_component_contract
        return []
    found = round_trip_problems(component.kind, implementation, dict(given)) or []
    return [f"{component.kind} {component.name!r}: {problem}" for problem in found]


def check_plugin_contract(
    name: str,
    registry: Registry | None = None,
    *,
    torch_free: bool = True,
    round_trip: bool = True,
    arguments: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Every problem with the plugin (or distribution) called ``name``; empty when it is sound.

    Checks that it is loaded, declares at least one component, that each component resolves by
    its qualified name ``distribution:Name`` (so another installed distribution providing the
    same name does not fail the check), imports, and has a schema matching its constructor, and
    (with ``torch_free``) that the plugin module and its schema modules import without torch.

    With ``round_trip``, each scheduler, optimizer and model that can be built (from
    ``arguments[Name]``, or from its defaults when it has no required argument) is advanced a
    few steps and its ``state_dict()`` goes through ``torch.save`` and
    ``torch.load(weights_only=True)`` into a fresh one, which must continue exactly.

    :param arguments: ``{Name: {argument: value}}`` to build components that need arguments.
    """
    registry = registry or plugins.get_registry()
    infos = [p for p in registry.plugins() if name in (p.name, p.distribution)]
    if not infos:
        return [f"no plugin or distribution named {name!r} is loaded"]
    problems = []
    modules: list[str] = []
    for info in infos:
        if info.status != "loaded":
            problems.append(f"plugin {info.name!r} is {info.status}: {info.error}")
            continue
        modules.append(info.module)
        components = [c for c in registry.components() if c.plugin.name == info.name]
        if not components:
            problems.append(f"plugin {info.name!r} registers no component")
        for component in components:
            qualified = f"{_owner_name(component)}:{component.name}"
            try:
                found = registry.lookup(component.kind, qualified)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{component.kind} {qualified!r} does not resolve: {exc}")
                continue
            contract = check_component_contract(found)
            problems.extend(contract)
            if round_trip and not contract:
                problems.extend(_round_trip(found, arguments))
            if isinstance(component.schema, str):
                modules.append(component.schema.partition(":")[0])
            else:
                modules.append(component.schema.__module__)
    if torch_free and modules:
        problems.extend(_torch_free_problems(sorted(set(modules))))
    return problems


def assert_plugin_contract(name: str, registry: Registry | None = None, **options: Any) -> None:
    """Fail with every problem :func:`check_plugin_contract` finds."""
    problems = check_plugin_contract(name, registry, **options)
    if problems:
        raise AssertionError("plugin contract broken:\n  " + "\n  ".join(problems))


# -- fixtures --------------------------------------------------------------------------------

if pytest is not None:

    @pytest.fixture
    def plugin_manager() -> pluggy.PluginManager:
        """A fresh plugin manager with plugtrain's hookspecs and no plugin registered."""
        return plugins.get_plugin_manager()

    @pytest.fixture
    def make_registry() -> Callable[..., Registry]:
        """Build an isolated registry: ``make_registry(plugin_a, plugin_b, builtin=False)``."""
        return isolated_registry

    @pytest.fixture
    def installed_registry() -> Registry:
        """A fresh registry of every installed plugin, as users get it."""
        return plugins.build_registry(plugins.PluginSettings.from_env())

    @pytest.fixture
    def fresh_backend() -> Iterator[None]:
        """Forget the process's backend type before and after the test (one type per process)."""
        from plugtrain.bases.backend import release_backend_type

        release_backend_type()
        yield
        release_backend_type()

    @pytest.fixture
    def register_plugin() -> Iterator[Callable[..., None]]:
        """Add in-memory plugins to the process-wide registry for this test only.

        Call it as ``register_plugin(plugin_object, name="mine")``.
        """
        settings = plugins.current_settings()
        saved_extra = plugins.current_extra()
        added: list[tuple[str, object]] = []

        def register(plugin: object, name: str | None = None) -> None:
            added.append((name or str(getattr(plugin, "__name__", type(plugin).__name__)), plugin))
            plugins.reset(settings, extra=(*saved_extra, *added))

        yield register
        plugins.reset(settings, extra=saved_extra)


def pytest_report_header(config: Any) -> str:
    """The core the tests run against, first in pytest's header (see ``core_versions``)."""
    from pathlib import Path

    import plugtrain

    where = Path(inspect.getfile(plugtrain)).parent.parent
    return (
        f"plugtrain {plugtrain.__version__} (plugin API {plugtrain.PLUGIN_API_VERSION}) "
        f"from {where}"
    )
