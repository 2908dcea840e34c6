"""Building one registered component from its validated spec; nested components first.

The one place where a component's implementation is called: a run file's plan, a Python
mapping ``{Name: {arguments}}`` and the loggers and sparsity algorithms given to a ``Trainer``
all come through :func:`build_component`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from plugtrain.bases.scheduler import build_nested
from plugtrain.config.plan import ComponentSpec
from plugtrain.config.validation.validate import plan_component
from plugtrain.errors import PluginLoadError
from plugtrain.registry.components import Component, Registry
from plugtrain.registry.kinds import KINDS
from plugtrain.train.components.conformity import check_built

__all__ = ["build_component", "takes_context"]


def takes_context(implementation: Any) -> bool:
    """Whether a component's constructor takes its kind's context arguments first.

    The context is what the caller supplies (an optimizer's ``params``, a scheduler's
    ``optimizer``). A component declares that it takes none with a class attribute
    ``takes_context = False`` (cstorch's ``ChainedScheduler`` takes its children only); see
    :class:`plugtrain.protocols.Scheduler`.
    """
    return bool(getattr(implementation, "takes_context", True))


def build_component(registry: Registry, kind: str, spec: Any, *context: Any) -> Any:
    """Build a component of ``kind``; nested components are built first.

    :param spec: a validated :class:`~plugtrain.config.plan.ComponentSpec` (from a plan), or a
        ``{Name: {arguments}}`` mapping from Python, validated here first; anything else (an
        object already built) is returned as it is.
    :param context: what the kind's constructors take first (the params of an optimizer, the
        optimizer of a scheduler); handed on to nested components of the same kind.
    :raises ConfigError: for a mapping that does not validate, naming every problem.
    """
    if isinstance(spec, Mapping):
        spec = plan_component(registry, kind, spec)
    if not isinstance(spec, ComponentSpec):
        return spec
    component = registry.lookup(spec.kind, spec.name)
    implementation = registry.resolve(spec.kind, spec.name)
    arguments = spec.call_arguments()
    for key, value in arguments.items():
        if isinstance(value, ComponentSpec):
            arguments[key] = _build_child(registry, spec, value, context)
        elif isinstance(value, list) and any(isinstance(v, ComponentSpec) for v in value):
            arguments[key] = [_build_child(registry, spec, item, context) for item in value]
    given = context[: len(KINDS[spec.kind].context_args)] if takes_context(implementation) else ()
    _check_signature(spec, component, implementation, given, arguments)
    built = implementation(*given, **arguments)
    check_built(spec.kind, built, component, spec.where)
    return built


def _build_child(
    registry: Registry, parent: ComponentSpec, child: Any, context: Sequence[Any]
) -> Any:
    """Build a nested component; a nested scheduler is built by the scheduler base's rule."""
    if not isinstance(child, ComponentSpec) or child.kind != parent.kind:
        return build_component(registry, getattr(child, "kind", ""), child)
    if child.kind != "scheduler" or not context:
        return build_component(registry, child.kind, child, *context)
    optimizer = context[0]
    return build_nested(optimizer, lambda: build_component(registry, child.kind, child, *context))


def _check_signature(
    spec: ComponentSpec,
    component: Component,
    implementation: Any,
    context: Sequence[Any],
    arguments: Mapping[str, Any],
) -> None:
    """Name the provider when a constructor refuses what its own schema accepted."""
    try:
        signature = inspect.signature(implementation)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*context, **arguments)
    except TypeError as exc:
        message = (
            f"{spec.where}: {component.kind} {component.name!r} from {component.provider} does "
            f"not accept arguments its schema allows ({exc}): the plugin's schema and "
            "constructor disagree; plugtrain.testing.check_plugin_contract reports such "
            "mismatches"
        )
        raise PluginLoadError(message) from exc
