"""Which plugin, and which of its components, an object or an error comes from (no torch here).

When a plugin's code raises during ``fit`` or ``plot``, the command line reports the plugin's
distribution and component (``scheduler 'Warmup' from acme-plugtrain-warmup 0.1.0 raised
ValueError: ...``) rather than an internal error of plugtrain. The owner of an error is found in
its traceback: the innermost frame whose module belongs to a loaded plugin (its components'
implementation modules, and the package holding its hook module). Nothing is imported here: an
implementation that was never imported cannot have raised.
"""

from __future__ import annotations

import sys
import traceback
from types import FrameType
from typing import TYPE_CHECKING, Any

from plugtrain.errors import ComponentError, PlugtrainError

if TYPE_CHECKING:
    from plugtrain.registry.components import Component, PluginInfo, Registry

__all__ = ["attribute_error", "component_of", "describe_owner"]


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from plugtrain.discovery.loading import get_registry

    return get_registry()


def _imported_implementation(component: Component) -> Any:
    """The implementation if its module is already imported, else ``None`` (imports nothing)."""
    module_name, _, attribute = component.target.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in attribute.split(".") if attribute else ():
        found = getattr(found, part, None)
    return found


def _own_class(obj: Any) -> type:
    """The class of ``obj``, past a subclass torch generated around it.

    ``fully_shard`` turns a model of class ``Net`` into one of ``FSDPNet`` (defined in torch,
    deriving from ``Net``): the model is still a ``Net``.
    """
    for cls in type(obj).__mro__:
        if cls is not object and not cls.__module__.startswith("torch."):
            return cls
    return type(obj)


def component_of(obj: Any, registry: Registry | None = None) -> Component | None:
    """The registered component whose implementation is the class of ``obj``, if any."""
    cls = _own_class(obj)
    for component in _registry(registry).components():
        if _imported_implementation(component) is cls:
            return component
    return None


def describe_owner(obj: Any, registry: Registry | None = None) -> str:
    """``"scheduler 'Warmup' from acme-plugtrain-warmup 0.1.0"``, else the class's dotted name."""
    try:
        component = component_of(obj, registry)
    except PlugtrainError:
        component = None
    if component is not None:
        return f"{component.kind} {component.name!r} from {component.provider}"
    cls = _own_class(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _code_prefixes(info: PluginInfo, components: list[Component]) -> set[str]:
    prefixes = {c.target.partition(":")[0] for c in components}
    module = sys.modules.get(info.module)
    if module is not None and hasattr(module, "__path__"):
        package = info.module
    else:
        package = info.module.rpartition(".")[0] or info.module
    # plugtrain's own modules are the core's, never a plugin's code
    if package != "plugtrain":
        prefixes.add(package)
    prefixes.add(info.module)
    return prefixes


def _belongs(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _frames(exc: BaseException) -> list[FrameType]:
    return [frame for frame, _ in traceback.walk_tb(exc.__traceback__)]


def _owner(exc: BaseException, registry: Registry) -> tuple[PluginInfo, Component | None] | None:
    frames = _frames(exc)
    plugins: dict[str, tuple[PluginInfo, list[Component], set[str]]] = {}
    for info in registry.plugins():
        if info.status == "loaded":
            mine = [c for c in registry.components() if c.plugin.name == info.name]
            plugins[info.name] = (info, mine, _code_prefixes(info, mine))
    for frame in reversed(frames):
        module = str(frame.f_globals.get("__name__", ""))
        for info, components, prefixes in plugins.values():
            if _belongs(module, prefixes):
                return info, _component_in(frames, module, components)
    return None


def _component_in(
    frames: list[FrameType], module: str, components: list[Component]
) -> Component | None:
    """The component whose code or instance appears in ``frames`` (innermost first)."""
    implementations = [(c, _imported_implementation(c)) for c in components]
    for frame in reversed(frames):
        this = frame.f_locals.get("self")
        for component, implementation in implementations:
            if implementation is None:
                continue
            if isinstance(implementation, type) and isinstance(this, implementation):
                return component
            if getattr(implementation, "__code__", None) is frame.f_code:
                return component
    here = [c for c in components if c.target.partition(":")[0] == module]
    return here[0] if len(here) == 1 else None


def attribute_error(exc: BaseException, registry: Registry | None = None) -> ComponentError | None:
    """A :class:`~plugtrain.errors.ComponentError` naming the plugin whose code raised ``exc``.

    ``None`` when ``exc`` is one of plugtrain's own errors or no plugin's code is in its
    traceback (a genuine internal error).
    """
    if isinstance(exc, PlugtrainError) or not isinstance(exc, Exception):
        return None
    try:
        found = _owner(exc, _registry(registry))
    except PlugtrainError:
        return None
    if found is None:
        return None
    info, component = found
    if component is not None:
        who = f"{component.kind} {component.name!r} from {component.provider}"
    else:
        who = f"plugin {info.name!r} from {info.provider}"
    error = ComponentError(f"{who} raised {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
