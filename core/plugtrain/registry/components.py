"""Components and the registry that resolves names to them.

A :class:`Component` is a lazy declaration: a name, an import string for the implementation and
an argument schema. The :class:`Registry` collects the components that plugins declare (through a
:class:`ComponentRegistrar` handed to each ``plugtrain_register_*`` hook) and resolves names:
exact name or alias; else a unique case-insensitive match; else :class:`UnknownNameError` with
close matches. A name provided by two plugins is a :class:`DuplicateNameError` until the user
picks one by qualifying it with the provider, ``"plugtrain-optimizers:SGD"`` (or blocks one
plugin with ``-p no:NAME``). A component registered with ``defer=True`` (a bridge to another
library) gives way: where another plugin provides its name, the bare name means the other one and
the deferring component answers only to ``"provider:Name"``.
"""

from __future__ import annotations

import importlib
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import attrs

from plugtrain.errors import DuplicateNameError, PluginLoadError, UnknownNameError
from plugtrain.registry._suggest import did_you_mean
from plugtrain.registry.kinds import KINDS, Kind, kind_named
from plugtrain.registry.schema import ArgInfo, arg_infos
from plugtrain.registry.shipped import shipped_by

__all__ = [
    "Component",
    "ComponentInfo",
    "ComponentRegistrar",
    "PluginInfo",
    "PluginList",
    "Registry",
    "import_target",
]

PluginStatus = Literal["loaded", "failed", "blocked", "not loaded", "not imported"]


@attrs.frozen
class PluginInfo:
    """What plugtrain knows about one plugin.

    :param name: the plugin's name: its entry-point name, or the module name for a plugin named
        with ``-p MODULE`` / ``plugins:``. This is the name ``-p no:NAME`` blocks.
    :param module: the module (entry-point value) that holds its hook implementations.
    :param distribution: the installed distribution that declares it (``None`` for a local module).
    :param version: that distribution's version.
    :param status: ``loaded``, ``failed``, ``blocked``, ``not loaded`` (autoload disabled) or
        ``not imported`` (a run file's local plugin, which ``check`` and ``plot`` do not import).
    :param error: for a failed plugin, what went wrong.
    :param hooks: the hooks it implements.
    """

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    status: PluginStatus = "loaded"
    error: str | None = None
    hooks: tuple[str, ...] = ()

    @property
    def provider(self) -> str:
        """``"dist version"`` or, for a local plugin, ``"name (local)"``.

        A local plugin's name is its module's for ``-p MODULE``, the object's for a plugin
        registered in memory.
        """
        if self.distribution is None:
            return f"{self.name} (local)"
        return f"{self.distribution} {self.version}"


def import_target(target: str) -> Any:
    """Import ``"package.module:attribute.path"`` and return the attribute."""
    module_name, _, attribute = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attribute.split(".") if attribute else ():
        obj = getattr(obj, part)
    return obj


@attrs.frozen
class ComponentInfo:
    """A component described for people and programs (``describe``, ``plugtrain show``).

    :param kind: the component's kind.
    :param name: its registered name.
    :param aliases: other names it answers to.
    :param summary: one line saying what it is.
    :param doc: the schema's full docstring.
    :param target: the import string of the implementation.
    :param plugin: the providing plugin's name.
    :param distribution: the providing distribution (``None`` for a local module).
    :param version: that distribution's version.
    :param arguments: every argument with type, default and constraint.
    """

    kind: str
    name: str
    aliases: tuple[str, ...]
    summary: str
    doc: str
    target: str
    plugin: str
    distribution: str | None
    version: str | None
    arguments: tuple[ArgInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        """The description as plain JSON-friendly data."""
        data = attrs.asdict(self, recurse=False)
        data["aliases"] = list(self.aliases)
        data["arguments"] = [a.to_dict() for a in self.arguments]
        return data


@attrs.frozen
class Component:
    """A named component declared by a plugin; the implementation is imported on first use.

    :param kind: ``optimizer``, ``scheduler``, ``backend``, ``model`` or ``dataloader``.
    :param name: the name users write, e.g. ``"SGD"``.
    :param target: import string of the implementation, ``"package.module:Class"``.
    :param schema: the argument schema (an attrs class built with :func:`plugtrain.schema.arg`),
        or an import string for it.
    :param aliases: other names that resolve to this component.
    :param summary: one line; defaults to the first line of the schema's docstring.
    :param plugin: the :class:`PluginInfo` of the plugin that declared it.
    :param defer: whether a bare name gives way to other providers of it (see
        :meth:`ComponentRegistrar.register`).
    """

    kind: str
    name: str
    target: str
    schema: type | str = attrs.field(repr=False)
    aliases: tuple[str, ...] = ()
    summary: str = ""
    plugin: PluginInfo = attrs.field(default=PluginInfo("<unknown>", "<unknown>"), repr=False)
    defer: bool = False

    @property
    def provider(self) -> str:
        """The providing distribution and version, as ``"dist version"``."""
        return self.plugin.provider

    @property
    def schema_class(self) -> type:
        """The schema class (imported here when it was declared by an import string)."""
        if isinstance(self.schema, str):
            return import_target(self.schema)  # type: ignore[no-any-return]
        return self.schema

    def load(self) -> Any:
        """Import and return the implementation."""
        try:
            return import_target(self.target)
        except (ImportError, AttributeError) as exc:
            message = (
                f"{self.kind} {self.name!r} from {self.provider} cannot be imported from "
                f"{self.target!r}: {type(exc).__name__}: {exc}"
            )
            raise PluginLoadError(message) from exc

    def describe(self) -> ComponentInfo:
        """Describe this component without importing its implementation."""
        schema = self.schema_class
        doc = _clean_doc(schema.__doc__)
        summary = self.summary or (doc.splitlines()[0] if doc else "")
        return ComponentInfo(
            kind=self.kind,
            name=self.name,
            aliases=self.aliases,
            summary=summary,
            doc=doc,
            target=self.target,
            plugin=self.plugin.name,
            distribution=self.plugin.distribution,
            version=self.plugin.version,
            arguments=tuple(arg_infos(schema)),
        )


def _clean_doc(doc: str | None) -> str:
    import inspect

    return inspect.cleandoc(doc) if doc else ""


class ComponentRegistrar:
    """What a ``plugtrain_register_*`` hook receives: registers components of one kind.

    It knows which plugin is registering, so every component records its provider.
    """

    def __init__(self, registry: Registry, kind: Kind, plugin: PluginInfo) -> None:
        self._registry = registry
        self._plugin = plugin
        self.kind = kind.name
        """The kind of component this hook registers (``"optimizer"`` ...)."""

    def register(
        self,
        name: str,
        target: str,
        *,
        schema: type | str,
        aliases: Iterable[str] = (),
        summary: str = "",
        defer: bool = False,
    ) -> None:
        """Declare one component.

        :param name: what users write in run files and in ``resolve``, e.g. ``"SGD"``.
        :param target: ``"package.module:Class"``; imported only when the component is used.
        :param schema: the attrs argument schema (or its import string); it must come from a
            module that does not import torch.
        :param aliases: other names for the same component.
        :param summary: one line; by default the first line of the schema's docstring.
        :param defer: give way to other plugins: where another plugin provides ``name`` (or an
            alias, or the name in another case), a bare look-up finds that one, with no
            conflict, and this component answers only to ``"provider:name"`` (the provider being
            this plugin's name or distribution).
            For bridges to other libraries, so that installing one never changes what an
            existing run file means.
        :raises ValueError: for a malformed name or target, or a name this plugin already used.
        """
        _check_name(name)
        for alias in aliases:
            _check_name(alias)
        module, colon, attribute = target.partition(":")
        if not module or not colon or not attribute:
            message = f"target must look like 'package.module:attribute', got {target!r}"
            raise ValueError(message)
        if not isinstance(schema, type | str):  # plugins are not type-checked
            message = f"schema of {name!r} must be an attrs class or an import string"  # type: ignore[unreachable]
            raise TypeError(message)
        if isinstance(schema, type) and not attrs.has(schema):
            message = f"schema of {name!r} must be an attrs class, got {schema!r}"
            raise TypeError(message)
        component = Component(
            kind=self.kind,
            name=name,
            target=target,
            schema=schema,
            aliases=tuple(aliases),
            summary=summary,
            plugin=self._plugin,
            defer=defer,
        )
        self._registry.add(component)

    def not_installed(self, names: Iterable[str], requirement: str) -> None:
        """Declare names this plugin would register if ``requirement`` were installed.

        Nothing is registered; an unknown-name error for one of ``names`` says which package
        provides it, e.g. "'ADOPT' is an optimizer of pytorch-optimizer, which is not installed
        (pip install pytorch-optimizer)".

        :param names: the names, as users would write them.
        :param requirement: what to ``pip install``.
        """
        for name in names:
            self._registry.add_not_installed(self.kind, name, requirement)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or ":" in name or name != name.strip():
        message = f"component names must be non-empty strings without ':' or spaces, got {name!r}"
        raise ValueError(message)
    problem = look_alike_problem(name)
    if problem is not None:
        message = f"component name {name!r} {problem}"
        raise ValueError(message)


def _script(character: str) -> str | None:
    """The script of a letter, from its Unicode name (``LATIN``, ``CYRILLIC`` ...)."""
    if not unicodedata.category(character).startswith("L"):
        return None
    name = unicodedata.name(character, "")
    return name.split(" ", 1)[0] if name else None


def look_alike_problem(name: str) -> str | None:
    """Why ``name`` could pass for another name, or ``None``.

    Refused: a name that NFKC normalization changes (full-width or compatibility letters), one
    holding an invisible, format or control character (zero-width space, BIDI controls), and
    one mixing letters of several scripts (a Cyrillic DZE among Latin letters).
    """
    normal = unicodedata.normalize("NFKC", name)
    if normal != name:
        return f"is not in Unicode normal form NFKC (it reads like {normal!r})"
    for character in name:
        category = unicodedata.category(character)
        if category in ("Cc", "Cf", "Cs", "Co", "Cn") or (
            category.startswith("Z") and character != " "
        ):
            code = f"U+{ord(character):04X}"
            label = unicodedata.name(character, "unnamed")
            return f"holds the invisible or control character {code} ({label})"
    scripts = sorted({s for s in map(_script, name) if s is not None})
    if len(scripts) > 1:
        return f"mixes letters of several scripts ({', '.join(scripts)}); it may pass for another"
    return None


class PluginList(list[PluginInfo]):
    """What ``registry.plugins`` is: call it, ``registry.plugins()``, as ``registry.names(kind)``.

    Every query of a :class:`Registry` is a method. Reading ``registry.plugins`` as a list (the
    spelling of plugtrain 0.1) still works and is deprecated.
    """

    def __call__(self) -> list[PluginInfo]:
        """The plugins, as a new list."""
        return list.copy(self)


class Registry:
    """Every component the loaded plugins declare, and name resolution over them.

    Queries are methods: :meth:`plugins`, :meth:`components`, :meth:`names`, :meth:`lookup`,
    :meth:`resolve`, :meth:`describe`, :meth:`find`.

    :param plugins: the plugins considered, loaded or not, for messages and listings.
    """

    def __init__(self, plugins: Iterable[PluginInfo] = ()) -> None:
        self._plugins: list[PluginInfo] = list(plugins)
        self._names: dict[str, dict[str, list[Component]]] = {k: {} for k in KINDS}
        self._loaded: dict[tuple[str, str], Any] = {}
        self._lower: dict[str, dict[str, set[str]]] | None = None
        self._not_installed: dict[str, dict[str, str]] = {k: {} for k in KINDS}

    # -- building ---------------------------------------------------------------------------

    def add(self, component: Component) -> None:
        """Add ``component`` (under its name and every alias).

        :raises ValueError: when the same plugin already declared that name for that kind.
        """
        table = self._names[component.kind]
        for key in (component.name, *component.aliases):
            providers = table.setdefault(key, [])
            if any(other.plugin.name == component.plugin.name for other in providers):
                message = f"{component.kind} {key!r} is registered twice by {component.provider}"
                raise ValueError(message)
            providers.append(component)
        self._lower = None
        self._loaded.clear()

    def add_not_installed(self, kind: str, name: str, requirement: str) -> None:
        """Remember that ``requirement`` would provide ``name`` (for unknown-name errors)."""
        self._not_installed[kind_named(kind).name][name.lower()] = requirement

    def remove_plugin(self, plugin_name: str) -> None:
        """Forget every component declared by the plugin called ``plugin_name``."""
        for table in self._names.values():
            for key in list(table):
                table[key] = [c for c in table[key] if c.plugin.name != plugin_name]
                if not table[key]:
                    del table[key]
        self._lower = None
        self._loaded.clear()

    def set_plugin(self, info: PluginInfo) -> None:
        """Record ``info`` in place of the plugin of the same name."""
        self._plugins = [info if p.name == info.name else p for p in self._plugins]

    # -- querying ---------------------------------------------------------------------------

    @property
    def plugins(self) -> PluginList:
        """Call it: ``registry.plugins()``, every plugin considered (loaded, failed, blocked ...).

        Each :class:`PluginInfo` has the plugin's name, module, distribution, version, status
        and error.
        """
        return PluginList(self._plugins)

    def components(self, kind: str | None = None) -> list[Component]:
        """Every component (of ``kind``, if given), one entry per provider, sorted by name."""
        kinds = [kind_named(kind).name] if kind is not None else list(KINDS)
        found: list[Component] = []
        for k in kinds:
            for key, providers in self._names[k].items():
                found.extend(c for c in providers if c.name == key)
        return sorted(found, key=lambda c: (list(KINDS).index(c.kind), c.name.lower(), c.name))

    def names(self, kind: str) -> list[str]:
        """The sorted names of ``kind`` (aliases excluded); imports no implementation."""
        table = self._names[kind_named(kind).name]
        return sorted({c.name for providers in table.values() for c in providers})

    def lookup(self, kind: str, name: str) -> Component:
        """The component ``name`` of ``kind``, following the resolution rules.

        :raises UnknownNameError: no such kind, or no component by that name.
        :raises DuplicateNameError: two plugins provide it and none was chosen.
        """
        k = kind_named(kind)
        if not isinstance(name, str):  # run files can hold anything
            message = f"{k.name} names are strings, got {type(name).__name__} {name!r}"  # type: ignore[unreachable]
            raise UnknownNameError(message)
        provider, sep, bare = name.rpartition(":")
        if sep:
            return self._lookup_qualified(k, provider, bare)
        exact = self._names[k.name].get(name)
        if exact is not None and not all(c.defer for c in exact):
            providers = exact
        else:
            # a deferring name also gives way to another plugin's name in another case
            try:
                providers = self._case_insensitive(k, name)
            except UnknownNameError:
                if exact is None:
                    raise
                providers = exact
            if exact is not None and all(c.defer for c in providers):
                providers = exact
        providers = _without_deferring(providers)
        if len(providers) > 1:
            raise DuplicateNameError(_conflict_message(k, name, providers))
        return providers[0]

    def _lookup_qualified(self, kind: Kind, provider: str, name: str) -> Component:
        table = self._names[kind.name]
        candidates = table.get(name)
        if candidates is None:
            if self._lower is None:
                self._lower = {k: _lower_index(t) for k, t in self._names.items()}
            keys = self._lower[kind.name].get(name.lower(), set())
            candidates = [c for key in sorted(keys) for c in table[key]]
        if not candidates:
            raise UnknownNameError(self._unknown_message(kind, name))
        for component in candidates:
            if provider in (component.plugin.name, component.plugin.distribution):
                return component
        offered = ", ".join(_qualified(c) for c in candidates)
        message = f"No plugin {provider!r} provides {kind.name} {name!r}; it comes from: {offered}."
        raise UnknownNameError(message)

    def _case_insensitive(self, kind: Kind, name: str) -> list[Component]:
        if self._lower is None:
            self._lower = {k: _lower_index(table) for k, table in self._names.items()}
        keys = self._lower[kind.name].get(name.lower(), set())
        table = self._names[kind.name]
        distinct = {id(c): c for key in keys for c in table[key]}
        distinct = {id(c): c for c in _without_deferring(distinct.values())}
        if len({c.name for c in distinct.values()}) == 1:
            return list(distinct.values())
        if len(distinct) > 1:
            options = " or ".join(sorted(f"'{key}'" for key in keys))
            message = (
                f"{kind.name} {name!r} is ambiguous: matches {options} "
                "(names ignore case only when unique)."
            )
            raise UnknownNameError(message)
        raise UnknownNameError(self._unknown_message(kind, name))

    def _unknown_message(self, kind: Kind, name: str) -> str:
        table = self._names[kind.name]
        hint = did_you_mean(name, table)
        providers = sorted({c.provider for cs in table.values() for c in cs})
        installed = {p.distribution for p in self._plugins if p.status == "loaded"}
        # only a distribution that ships this very name is worth installing
        shipping = [d for d in shipped_by(kind.name, name) if d not in installed]
        elsewhere = self._not_installed[kind.name].get(name.lower())
        if elsewhere is not None and not shipping:
            shipping = [elsewhere]
        if providers:
            source = f" {kind.plural.capitalize()} come from: {', '.join(providers)}."
            if shipping:
                source += (
                    f" {name!r} is {_article(kind.name)} {kind.name} of {shipping[0]}, which is "
                    f"not installed (pip install {shipping[0]})."
                )
        elif shipping:
            source = (
                f" No installed plugin provides {kind.plural}; "
                f"install {shipping[0]} (pip install {shipping[0]})."
            )
        else:
            source = f" No installed plugin provides {kind.plural}."
        failed = [p for p in self._plugins if p.status == "failed"]
        if failed:
            source += " Plugins that failed to load: " + ", ".join(p.name for p in failed) + "."
        withheld = [p.name for p in self._plugins if p.status == "not imported"]
        if withheld:
            source += (
                f" The run file's plugins {', '.join(withheld)} were not imported "
                f"(check and plot import a local plugin only with -p, e.g. -p {withheld[0]})."
            )
        return f"Unknown {kind.name} {name!r}.{hint}{source}"

    def resolve(self, kind: str, name: str) -> Any:
        """The implementation of ``name``, imported on first use and cached."""
        key = (kind, name)
        try:
            return self._loaded[key]
        except KeyError:
            pass
        implementation = self.lookup(kind, name).load()
        self._loaded[key] = implementation
        return implementation

    def describe(self, kind: str, name: str) -> ComponentInfo:
        """Describe ``name`` of ``kind`` without importing its implementation."""
        return self.lookup(kind, name).describe()

    def find(self, name: str) -> list[Component]:
        """Components of any kind answering to ``name`` (for ``plugtrain show NAME``)."""
        found = []
        for kind in KINDS.values():
            try:
                found.append(self.lookup(kind.name, name))
            except DuplicateNameError:
                found.extend(self._names[kind.name].get(name, []))
            except UnknownNameError:
                continue
        return found

    def __iter__(self) -> Iterator[Component]:
        return iter(self.components())


def _without_deferring(providers: Iterable[Component]) -> list[Component]:
    """The providers a bare name means: deferring ones only when no other provides it."""
    found = list(providers)
    firm = [c for c in found if not c.defer]
    return firm or found


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _lower_index(table: dict[str, list[Component]]) -> dict[str, set[str]]:
    index: dict[str, set[str]] = {}
    for key in table:
        index.setdefault(key.lower(), set()).add(key)
    return index


def _qualified(component: Component) -> str:
    # a bridge's plugin is named after its library ("torch:Adamax"); its distribution has several
    owner = component.plugin.name if component.defer else None
    owner = owner or component.plugin.distribution or component.plugin.name
    return f"'{owner}:{component.name}' ({component.provider})"


def _conflict_message(kind: Kind, name: str, providers: list[Component]) -> str:
    choices = " or ".join(_qualified(c) for c in providers)
    blocks = " / ".join(f"-p no:{c.plugin.name}" for c in providers)
    return (
        f"{kind.name} {name!r} is provided by {len(providers)} plugins. "
        f"Choose one by writing {choices}, or block the other plugin ({blocks}, "
        f"or PLUGTRAIN_BLOCK_PLUGINS)."
    )
