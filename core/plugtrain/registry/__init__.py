"""Components and the registry that resolves names to them: the core's ground for plugins.

This room holds what every other one looks names up through: :mod:`.components` (lazy
components, the :class:`Registry` and its name resolution), :mod:`.schema` (argument schemas:
the torch-free language a component declares what it accepts in), :mod:`.kinds` (the kinds of
component and facts about each), :mod:`.shipped` (the names plugtrain's own distributions ship)
and the did-you-mean suggestions. Importing ``plugtrain.registry`` gives the registry's public
names; ``plugtrain.schema`` is :mod:`plugtrain.registry.schema`.
"""

from __future__ import annotations

from plugtrain.registry.components import (
    Component,
    ComponentInfo,
    ComponentRegistrar,
    PluginInfo,
    PluginList,
    Registry,
    import_target,
)

__all__ = [
    "Component",
    "ComponentInfo",
    "ComponentRegistrar",
    "PluginInfo",
    "PluginList",
    "Registry",
    "import_target",
]
