"""Running a plugin's tests against the oldest or the newest plugtrain core it allows.

::

    python -m plugtrain.authoring.core_versions oldest -- python -m pytest
    python -m plugtrain.authoring.core_versions newest -- python -m pytest

reads the plugin's requirement on ``plugtrain`` from ``pyproject.toml`` (``--project``, default
the current folder), installs the core that end of the range names into a folder of its own
(``pip install --no-deps --target``: ``plugtrain==LOWEST`` for ``oldest``, the newest release the
requirement allows for ``newest``; ``--core`` installs a given source instead: a checkout, a
wheel, a URL, and then checks its version), and runs the command with that core first on
``PYTHONPATH``. Everything else, the plugin included, comes from the current environment. The
exit status is the command's. plugtrain's pytest plugin prints which core the tests ran against.

Nothing here imports torch; ``packaging`` (which pytest and pip depend on) reads the versions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["core_requirement_of", "install_core", "lowest_allowed", "main"]


def core_requirement_of(project: Path) -> str:
    """The project's requirement on ``plugtrain`` as written in ``pyproject.toml``.

    :raises ValueError: when the file has no ``project.dependencies`` entry for plugtrain.
    """
    from packaging.requirements import Requirement

    text = (project / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    dependencies = tomllib.loads(text).get("project", {}).get("dependencies", [])
    for dependency in dependencies:
        if Requirement(dependency).name.lower() == "plugtrain":
            return str(dependency)
    message = f"{project / 'pyproject.toml'} does not require plugtrain in project.dependencies"
    raise ValueError(message)


def lowest_allowed(requirement: str) -> str:
    """The oldest core a requirement allows: ``"plugtrain>=0.1"`` -> ``"0.1"``.

    :raises ValueError: when the requirement has no lower bound (``>=``, ``==``, ``~=``).
    """
    from packaging.requirements import Requirement

    bounds = [
        s.version for s in Requirement(requirement).specifier if s.operator in (">=", "==", "~=")
    ]
    if not bounds:
        message = f"{requirement!r} has no lower bound; require plugtrain>=VERSION"
        raise ValueError(message)
    from packaging.version import Version

    return max(bounds, key=Version)


def install_core(target: Path, spec: str, pip_options: Sequence[str] = ()) -> str:
    """Install the core named by ``spec`` (a requirement or a source) into ``target``.

    :returns: the installed core's version.
    """
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade"]
    command += ["--target", str(target), *pip_options, spec]
    subprocess.run(command, check=True)
    import importlib.metadata

    found = list(importlib.metadata.distributions(name="plugtrain", path=[str(target)]))
    if not found:
        message = f"installing {spec!r} put no plugtrain distribution into {target}"
        raise RuntimeError(message)
    return found[0].version


def _check_version(which: str, version: str, requirement: str) -> str | None:
    from packaging.requirements import Requirement
    from packaging.version import Version

    specifier = Requirement(requirement).specifier
    if not specifier.contains(version, prereleases=True):
        return f"the core installed is plugtrain {version}, outside {requirement!r}"
    if which == "oldest" and Version(version) != Version(lowest_allowed(requirement)):
        lowest = lowest_allowed(requirement)
        return f"the core installed is plugtrain {version}, not the oldest allowed ({lowest})"
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m plugtrain.authoring.core_versions",
        usage="%(prog)s {oldest,newest} [options] -- COMMAND [ARGS...]",
        description="Run a command (a plugin's tests) against the oldest or newest core it allows.",
    )
    parser.add_argument("which", choices=("oldest", "newest"), help="which end of the range")
    parser.add_argument("--project", type=Path, default=Path(), help="folder of pyproject.toml")
    parser.add_argument("--core", help="install this source of plugtrain instead of the index's")
    parser.add_argument("--target", type=Path, help="where to install the core (default: temp)")
    parser.add_argument(
        "--pip-option", action="append", default=[], help="passed to pip install (repeatable)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Install the core and run the command; returns the command's exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--" not in arguments:
        _parser().error("give the command to run after --")
    split = arguments.index("--")
    args = _parser().parse_args(arguments[:split])
    command = arguments[split + 1 :]
    if not command:
        _parser().error("give the command to run after --")
    requirement = core_requirement_of(args.project)
    if args.core:
        spec = args.core
    elif args.which == "oldest":
        spec = f"plugtrain=={lowest_allowed(requirement)}"
    else:
        spec = requirement
    with tempfile.TemporaryDirectory(prefix="plugtrain-core-") as temporary:
        target = args.target or Path(temporary)
        try:
            version = install_core(target, spec, args.pip_option)
        except subprocess.CalledProcessError:
            sys.stderr.write(f"core_versions: pip could not install {spec!r} (see above)\n")
            return 2
        problem = _check_version(args.which, version, requirement)
        if problem is not None:
            sys.stderr.write(f"core_versions: {problem}\n")
            return 2
        sys.stderr.write(f"core_versions: running against plugtrain {version} from {target}\n")
        return _run(command, target)


def _run(command: Sequence[str], target: Path) -> int:
    environ: dict[str, Any] = dict(os.environ)
    paths = [str(target), environ.get("PYTHONPATH", "")]
    environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return subprocess.run(list(command), env=environ, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
