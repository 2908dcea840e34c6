"""Finding, loading and isolating plugins.

Installed plugins are the entry points of group ``plugtrain``; each is loaded on its own, so one
that fails to import, implements an unknown hook, or raises inside a hook is reported once on
stderr (with its distribution and version) and skipped while the others keep working.

Switches, as in pytest:

- ``PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry point except those named explicitly.
- ``PLUGTRAIN_BLOCK_PLUGINS=a,b`` or ``-p no:a``: never load plugin ``a`` (entry-point name,
  distribution name or module name).
- ``-p MODULE`` / ``plugins: [MODULE]`` in a run file: also load that module (or that entry point
  when autoloading is off). Nothing else in a run file can cause an import, and a run file's
  ``plugins:`` are imported only by commands that train or evaluate
  (:func:`run_file_plugin_settings`):
  ``check`` and ``plot`` import only those that are installed or also named with ``-p``.
- ``PLUGTRAIN_STRICT_PLUGINS=1``: a plugin failure raises :class:`PluginLoadError` instead.

Isolation covers every exception a plugin's import or hook raises, ``SystemExit`` included (a
failure of that plugin, never a silent exit of the program). ``KeyboardInterrupt`` still stops the
program, as :class:`PluginInterrupted` naming the plugin it interrupted. While plugins load,
``sys.stdout`` is ``sys.stderr``: what a plugin prints cannot mix with a command's output.

Modules are found on ``sys.path`` as Python sets it, except that ``python -m plugtrain`` drops the
current folder Python puts first, so that it finds exactly what the ``plugtrain`` script finds: a
local module is one on ``PYTHONPATH`` (``PYTHONPATH=. plugtrain fit run.yaml``) or installed.

A distribution that declares the plugin API versions it supports (:mod:`.compat`) and
none of them is compatible with :data:`plugtrain.PLUGIN_API_VERSION` fails without being imported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

import attrs
import pluggy

from plugtrain.contract import hookspecs
from plugtrain.discovery import compat
from plugtrain.errors import PluginLoadError
from plugtrain.registry._suggest import did_you_mean
from plugtrain.registry.components import ComponentRegistrar, PluginInfo, Registry
from plugtrain.registry.kinds import KINDS

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginInterrupted",
    "PluginSettings",
    "build_registry",
    "get_plugin_manager",
    "get_registry",
    "plugin_output_to_stderr",
    "reset",
    "run_file_plugin_settings",
]

ENTRY_POINT_GROUP = "plugtrain"
BUILTIN_PLUGIN = "builtin"
"""Name of the core's own plugin (models and data loaders), blockable with ``-p no:builtin``."""

_TRUE = frozenset({"1", "true", "yes", "on"})

WITHHELD = (
    "named by the run file and not imported: check and plot import only the plugins that are "
    "installed or named with -p (fit and validate import a run file's plugins)"
)
"""Why a plugin listed under a run file's ``plugins:`` was not imported."""


class PluginInterrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` (Ctrl-C, or raised by a plugin) while a plugin was loading.

    It stops the program like any ``KeyboardInterrupt``; the message names the plugin.
    """


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in _TRUE


@attrs.frozen
class PluginSettings:
    """Which plugins to load and how strictly.

    :param autoload: load every installed entry point (``PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD``).
    :param strict: turn a plugin failure into an error (``PLUGTRAIN_STRICT_PLUGINS``).
    :param blocked: plugin, distribution or module names never to load.
    :param explicit: modules (or entry-point names) to load in addition, in order.
    :param withheld: modules a run file lists that are recorded as not imported (status
        ``not imported``), so that a name they would provide is reported with the reason.
    """

    autoload: bool = True
    strict: bool = False
    blocked: frozenset[str] = frozenset()
    explicit: tuple[str, ...] = ()
    withheld: tuple[str, ...] = ()

    @classmethod
    def from_env(
        cls, plugin_args: Iterable[str] = (), environ: Mapping[str, str] | None = None
    ) -> PluginSettings:
        """Settings from the environment plus ``-p`` style arguments (``MODULE`` or ``no:NAME``)."""
        env = os.environ if environ is None else environ
        blocked = {
            n.strip() for n in env.get("PLUGTRAIN_BLOCK_PLUGINS", "").split(",") if n.strip()
        }
        explicit: list[str] = []
        for item in plugin_args:
            if item.startswith("no:"):
                blocked.add(item[3:])
            elif item not in explicit:
                explicit.append(item)
        return cls(
            autoload=not _flag(env, "PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD"),
            strict=_flag(env, "PLUGTRAIN_STRICT_PLUGINS"),
            blocked=frozenset(blocked),
            explicit=tuple(explicit),
        )

    def with_plugins(self, modules: Iterable[str]) -> PluginSettings:
        """These settings with ``modules`` added to the explicit plugins."""
        extra = [m for m in modules if m not in self.explicit]
        return attrs.evolve(self, explicit=(*self.explicit, *extra))

    def is_blocked(self, *names: str | None) -> bool:
        """Whether any of ``names`` is blocked."""
        return any(name in self.blocked for name in names if name)


_reported: set[tuple[str, str]] = set()


def _report(info: PluginInfo) -> None:
    key = (info.name, info.error or "")
    if key in _reported:
        return
    _reported.add(key)
    sys.stderr.write(
        f"plugtrain: plugin {info.name!r} from {info.provider} failed and was skipped: "
        f"{info.error} (set PLUGTRAIN_STRICT_PLUGINS=1 to make this an error)\n"
    )


def _describe_exception(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): the plugin called sys.exit()"
    return f"{type(exc).__name__}: {exc}"


def _interrupted(info: PluginInfo, exc: KeyboardInterrupt, where: str = "") -> NoReturn:
    what = f"in hook {where} of" if where else "while loading"
    message = f"interrupted {what} plugin {info.name!r} from {info.provider}"
    raise PluginInterrupted(message) from exc


def _not_found_hint(exc: BaseException, module_name: str) -> str:
    """A hint for a local module Python cannot find because it sits in the current folder."""
    if not isinstance(exc, ModuleNotFoundError) or exc.name != module_name.partition(".")[0]:
        return ""
    top = Path.cwd() / exc.name
    if not (top.with_suffix(".py").is_file() or (top / "__init__.py").is_file()):
        return ""
    return (
        f" ({exc.name} is in the current folder, which plugtrain does not search: "
        "run with PYTHONPATH=. or install it)"
    )


class _Loader:
    """Loads plugins into a fresh plugin manager, one at a time, recording each outcome."""

    def __init__(self, settings: PluginSettings) -> None:
        self.settings = settings
        self.pm = get_plugin_manager()
        self.infos: dict[str, PluginInfo] = {}

    def fail(self, info: PluginInfo, exc: BaseException | str) -> None:
        error = exc if isinstance(exc, str) else _describe_exception(exc)
        info = attrs.evolve(info, status="failed", error=error, hooks=())
        self.infos[info.name] = info
        if self.settings.strict:
            message = f"plugin {info.name!r} from {info.provider} failed: {error}"
            if isinstance(exc, BaseException):
                raise PluginLoadError(message) from exc
            raise PluginLoadError(message)
        _report(info)

    def register(self, plugin: object, info: PluginInfo) -> None:
        try:
            self.pm.register(plugin, name=info.name)
            unknown = _unknown_hooks(self.pm, plugin)
        except KeyboardInterrupt as exc:
            _interrupted(info, exc)
        except BaseException as exc:  # noqa: BLE001 - a plugin may fail in any way; isolate it
            self.fail(info, exc)
            return
        if unknown:
            self.pm.unregister(name=info.name)
            self.fail(info, unknown)
            return
        hooks = tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()))
        self.infos[info.name] = attrs.evolve(info, hooks=hooks)

    def load_entry_points(self) -> set[str]:
        seen: set[str] = set()
        claimed: set[str] = set()
        for ep in sorted(_entry_points(), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
            if ep.name in seen:
                continue
            seen.add(ep.name)
            info = PluginInfo(ep.name, ep.value, dist_name, version)
            if self.settings.is_blocked(ep.name, dist_name, ep.value):
                self.infos[ep.name] = attrs.evolve(info, status="blocked")
                continue
            wanted = {n for n in (ep.name, dist_name, ep.value) if n} & set(self.settings.explicit)
            claimed |= wanted
            if not self.settings.autoload and not wanted:
                self.infos[ep.name] = attrs.evolve(info, status="not loaded")
                continue
            # Checked from metadata before the import: an incompatible plugin may not even import.
            problem = compat.incompatibility(dist) if dist is not None else None
            if problem is not None:
                self.fail(info, problem)
                continue
            try:
                plugin = ep.load()
            except KeyboardInterrupt as exc:
                _interrupted(info, exc)
            except BaseException as exc:  # noqa: BLE001 - isolate a plugin that cannot import
                self.fail(info, exc)
                continue
            self.register(plugin, info)
        return claimed

    def load_module(
        self, module_name: str, *, name: str | None = None, distribution: str | None = None
    ) -> None:
        name = name or module_name
        version = _version_of(distribution) if distribution else None
        info = PluginInfo(name, module_name, distribution, version)
        if self.settings.is_blocked(name, module_name):
            self.infos[name] = attrs.evolve(info, status="blocked")
            return
        try:
            module = importlib.import_module(module_name)
        except KeyboardInterrupt as exc:
            _interrupted(info, exc)
        except BaseException as exc:  # noqa: BLE001 - isolate a plugin that cannot import
            hint = _not_found_hint(exc, module_name)
            self.fail(info, f"{_describe_exception(exc)}{hint}" if hint else exc)
            return
        self.register(module, info)


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _unknown_hooks(pm: pluggy.PluginManager, plugin: object) -> str:
    """A message naming hook implementations without a spec, or ``""``."""
    known = [name for name in dir(hookspecs) if name.startswith("plugtrain_")]
    unknown = []
    for attribute in dir(plugin):
        if pm.parse_hookimpl_opts(plugin, attribute) is None:
            continue
        if attribute not in known:
            unknown.append(f"{attribute!r}{did_you_mean(attribute, known)}")
    if not unknown:
        return ""
    return "implements unknown hook " + "; ".join(unknown)


def get_plugin_manager() -> pluggy.PluginManager:
    """A fresh plugin manager with plugtrain's hook specifications and no plugin registered."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return pm


def build_registry(
    settings: PluginSettings | None = None, *, extra: Iterable[tuple[str, object]] = ()
) -> Registry:
    """Load plugins as ``settings`` say and collect their components into a new registry.

    :param settings: what to load; by default :meth:`PluginSettings.from_env`.
    :param extra: ``(name, plugin object)`` pairs registered in addition (used by tests).
    :raises PluginLoadError: in strict mode, on the first plugin failure.
    """
    settings = settings or PluginSettings.from_env()
    loader = _Loader(settings)
    with _stdout_to_stderr():
        claimed = loader.load_entry_points()
        loader.load_module("plugtrain.builtin", name=BUILTIN_PLUGIN, distribution="plugtrain")
        for name in settings.explicit:
            if name not in claimed and name not in loader.infos:
                loader.load_module(name)
        for name, plugin in extra:
            info = PluginInfo(name, _module_of(plugin))
            if settings.is_blocked(name):
                loader.infos[name] = attrs.evolve(info, status="blocked")
            else:
                loader.register(plugin, info)
        for name in settings.withheld:
            if name not in loader.infos:
                loader.infos[name] = PluginInfo(name, name, status="not imported", error=WITHHELD)
        return _collect(loader)


def _module_of(plugin: object) -> str:
    """The module holding an in-memory plugin's hooks: the module itself, or a class's module."""
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    owner = plugin if isinstance(plugin, type) else type(plugin)
    return str(owner.__module__)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Plugin code runs with its output sent to stderr (:func:`plugin_output_to_stderr`)."""
    with plugin_output_to_stderr():
        yield


@contextlib.contextmanager
def plugin_output_to_stderr() -> Iterator[None]:
    """Send what plugin code prints to stderr, whichever way it prints, while the block runs.

    ``sys.stdout`` becomes ``sys.stderr``, and file descriptor 1 a copy of descriptor 2, so a
    banner written with ``os.write(1, ...)``, by a child process or by C code cannot mix with a
    command's output (``plugtrain list --json``). What was printed before goes out first; both
    are restored afterwards. Nested uses redirect once.
    """
    global _redirect_depth  # noqa: PLW0603 - one redirection per process, however nested
    if _redirect_depth:
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    saved = _descriptor_1_to_2()
    _redirect_depth += 1
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _redirect_depth -= 1
        if saved is not None:
            _flush_c_stdout()
            with contextlib.suppress(OSError):
                os.dup2(saved, 1)
            os.close(saved)


_redirect_depth = 0


def _descriptor_1_to_2() -> int | None:
    """Point descriptor 1 at what 2 is; return a copy of the old 1 (``None``: not possible)."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stdout.flush()
    _flush_c_stdout()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (closed, or a GUI process): nothing to redirect
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _flush_c_stdout() -> None:
    """Flush the C library's ``stdout`` buffer (C code's output goes where it was written)."""
    if os.name != "posix":
        return
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (ImportError, OSError, AttributeError):
        return


def _collect(loader: _Loader) -> Registry:
    registry = Registry(loader.infos.values())
    for kind in KINDS.values():
        caller = getattr(loader.pm.hook, kind.hook)
        for impl in caller.get_hookimpls():
            info = loader.infos[impl.plugin_name]
            if info.status != "loaded":
                continue
            registrar = ComponentRegistrar(registry, kind, info)
            try:
                returned = impl.function(**dict.fromkeys(impl.argnames, registrar))
                if returned is not None:
                    message = (
                        f"hook {kind.hook} returned {returned!r}; hooks must register through "
                        "registry.register(...) and return None"
                    )
                    raise TypeError(message)  # noqa: TRY301 - reported like any hook failure
            except KeyboardInterrupt as exc:
                _interrupted(info, exc, kind.hook)
            except BaseException as exc:  # noqa: BLE001 - isolate a plugin whose hook raises
                registry.remove_plugin(info.name)
                loader.fail(info, f"in hook {kind.hook}: {_describe_exception(exc)}")
                registry.set_plugin(loader.infos[info.name])
    return registry


_default_registry: Registry | None = None
_default_settings: PluginSettings | None = None
_default_extra: tuple[tuple[str, object], ...] = ()


def get_registry() -> Registry:
    """The process-wide registry, built on first use from the environment's settings."""
    global _default_registry  # noqa: PLW0603 - one lazily built registry per process
    if _default_registry is None:
        _default_registry = build_registry(_default_settings, extra=_default_extra)
    return _default_registry


def reset(
    settings: PluginSettings | None = None, *, extra: Iterable[tuple[str, object]] = ()
) -> None:
    """Forget the process-wide registry; the next use rebuilds it.

    :param settings: what to load then (default: from the environment).
    :param extra: ``(name, plugin object)`` pairs to register in addition.
    """
    global _default_registry, _default_settings, _default_extra  # noqa: PLW0603
    _default_registry = None
    _default_settings = settings
    _default_extra = tuple(extra)


@contextlib.contextmanager
def restored_afterwards() -> Iterator[None]:
    """Put the process-wide registry and its settings back as they were when the block ends.

    The command line resets them from its ``-p`` options; called in-process (from a program or
    a test), it must not leave those options behind for the caller.
    """
    global _default_registry, _default_settings, _default_extra
    saved = (_default_registry, _default_settings, _default_extra)
    try:
        yield
    finally:
        _default_registry, _default_settings, _default_extra = saved


def current_settings() -> PluginSettings | None:
    """The settings the process-wide registry is (or will be) built with; ``None``: environment."""
    return _default_settings


def current_extra() -> tuple[tuple[str, object], ...]:
    """The in-memory plugins the process-wide registry includes."""
    return _default_extra


def installed_plugin_names() -> frozenset[str]:
    """Entry-point names, distribution names and modules of the installed plugins."""
    names: set[str] = set()
    for ep in _entry_points():
        dist = getattr(ep, "dist", None)
        names.update((ep.name, ep.value, ep.module))
        if dist is not None:
            names.add(dist.metadata["Name"])
    return frozenset(names)


def run_file_plugin_settings(
    modules: Iterable[str], *, import_local: bool, settings: PluginSettings | None = None
) -> PluginSettings:
    """The plugin settings for a run whose file lists ``modules`` under ``plugins:``.

    :param modules: the listed module (or entry-point) names.
    :param import_local: import every one (``fit``, ``validate``); when false (``check``,
        ``plot``) only those that are installed plugins or already named with ``-p`` are
        loaded, and the others are recorded as ``not imported`` and reported once on stderr.
    :param settings: the settings to start from; default: the process's current ones.
    """
    modules = list(dict.fromkeys(modules))
    current = settings or _default_settings or PluginSettings.from_env()
    withheld: list[str] = []
    if not import_local and modules:  # the scan of installed plugins takes milliseconds
        installed = installed_plugin_names()
        withheld = [m for m in modules if m not in current.explicit and m not in installed]
        modules = [m for m in modules if m not in withheld]
    new_withheld = [m for m in withheld if m not in current.withheld]
    if new_withheld:
        sys.stderr.write(
            f"plugtrain: not importing {', '.join(map(repr, new_withheld))} from the run "
            "file's plugins: check and plot import only plugins that are installed or named "
            f"with -p (e.g. -p {new_withheld[0]}); fit and validate import them\n"
        )
    return attrs.evolve(current.with_plugins(modules), withheld=(*current.withheld, *new_withheld))


def plugin_summary(registry: Registry) -> list[dict[str, Any]]:
    """Each plugin with provider, status, hooks and names, as ``plugtrain plugins`` shows them.

    ``api`` is the list of plugin API versions its distribution declares (``[]`` when it declares
    none, ``None`` for a local module).
    """
    contributed: dict[str, dict[str, list[str]]] = {}
    for component in registry.components():
        per_kind = contributed.setdefault(component.plugin.name, {})
        per_kind.setdefault(component.kind, []).append(component.name)
    rows = []
    for info in sorted(registry.plugins(), key=lambda p: p.name):
        row = attrs.asdict(info)
        row["hooks"] = list(info.hooks)
        row["components"] = contributed.get(info.name, {})
        row["api"] = _declared_api(info.distribution)
        rows.append(row)
    return rows


def _declared_api(distribution: str | None) -> list[str] | None:
    """The plugin API versions ``distribution`` declares; ``None`` for a local module."""
    if distribution is None:
        return None
    if distribution == "plugtrain":  # the core's own plugin is written for the API it provides
        from plugtrain._version import PLUGIN_API_VERSION

        return [PLUGIN_API_VERSION]
    try:
        return compat.declared_api(importlib.metadata.distribution(distribution))
    except importlib.metadata.PackageNotFoundError:
        return None
