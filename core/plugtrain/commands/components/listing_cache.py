"""The rows of ``plugtrain list``, kept between calls while nothing they depend on changes.

Listing loads every plugin and imports every argument schema; that costs more than the rest
of the command together. The rows it produced are stored in a cache file with a fingerprint of
what produced them, and used again only while the fingerprint is unchanged:

- the interpreter (``sys.executable``, its version), plugtrain's version and ``sys.path``;
- the modification time of every ``sys.path`` folder: installing, upgrading or removing a
  distribution (its ``*.dist-info``, an editable install's ``.pth``) changes its folder;
- the ``PLUGTRAIN_*`` environment variables (blocked plugins, autoload, strict mode);
- every module file that was imported when the rows were made (plugtrain, each plugin's
  modules and schemas, the libraries a bridge reads), by modification time and size: editing
  a plugin in place, an editable install's source included, invalidates it. (A data file a
  plugin reads while registering, not being a module, is not watched.)

Only the plain command line uses it (no ``-p``, no ``--markdown``), and only rows made without
a plugin failure are stored, so that a failure is reported every time. The cache lives in
``$PLUGTRAIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/plugtrain``, else ``~/.cache/plugtrain``, one
file per interpreter and ``sys.path``; ``PLUGTRAIN_NO_CACHE=1`` turns it off. A cache that
cannot be read or written is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

__all__ = ["CACHE_DIR_VARIABLE", "NO_CACHE_VARIABLE", "cache_file", "load_rows", "store_rows"]

CACHE_DIR_VARIABLE = "PLUGTRAIN_CACHE_DIR"
NO_CACHE_VARIABLE = "PLUGTRAIN_NO_CACHE"
_FORMAT = 1
_OWN_VARIABLES = frozenset({CACHE_DIR_VARIABLE, NO_CACHE_VARIABLE})


def _enabled() -> bool:
    return os.environ.get(NO_CACHE_VARIABLE, "").strip().lower() not in ("1", "true", "yes", "on")


def _folder() -> Path:
    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "plugtrain"


def cache_file() -> Path:
    """The cache file of this interpreter and ``sys.path``."""
    where = json.dumps([sys.executable, sys.path])
    digest = hashlib.sha256(where.encode("utf-8")).hexdigest()[:20]
    return _folder() / f"list-{digest}.json"


def _stat(path: str) -> list[int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_mtime_ns, found.st_size]


def _fingerprint() -> dict[str, Any]:
    """What the rows depend on, apart from the module files (checked one by one)."""
    from plugtrain._version import __version__

    return {
        "format": _FORMAT,
        "python": [sys.executable, sys.version],
        "plugtrain": __version__,
        "path": [[entry, _stat(entry or os.curdir)] for entry in sys.path],
        "environment": sorted(
            (key, value)
            for key, value in os.environ.items()
            if key.startswith("PLUGTRAIN_") and key not in _OWN_VARIABLES
        ),
    }


def _module_files() -> dict[str, list[int] | None]:
    """Every imported module's file outside the standard library, with its time and size."""
    paths = sysconfig.get_paths()
    stdlib = tuple(
        os.path.join(paths[key], "") for key in ("stdlib", "platstdlib") if paths.get(key)
    )
    site = tuple(os.path.join(p, "") for p in (paths.get("purelib"), paths.get("platlib")) if p)
    files: dict[str, list[int] | None] = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not isinstance(name, str) or name in files:
            continue
        if name.startswith(stdlib) and not name.startswith(site):
            continue  # changes only with the interpreter, which the fingerprint names
        files[name] = _stat(name)
    return files


def load_rows() -> list[dict[str, Any]] | None:
    """The stored rows if nothing they depend on changed, else ``None``."""
    if not _enabled():
        return None
    try:
        stored = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("fingerprint") != _fingerprint():
        return None
    files = stored.get("files")
    rows = stored.get("rows")
    if not isinstance(files, dict) or not isinstance(rows, list):
        return None
    if any(_stat(name) != when for name, when in files.items()):
        return None
    return rows


def store_rows(rows: list[dict[str, Any]]) -> None:
    """Store ``rows`` with the fingerprint of now (call once every schema has been imported)."""
    if not _enabled():
        return
    target = cache_file()
    data = {"fingerprint": _fingerprint(), "files": _module_files(), "rows": rows}
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(data), encoding="utf-8")
            os.replace(temporary, target)
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
