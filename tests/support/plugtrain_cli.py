"""Running ``python -m plugtrain`` in a fresh interpreter, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

StrPath = str | os.PathLike[str]


def plugtrain_command(*args: StrPath, python: StrPath = sys.executable) -> list[str]:
    """The argument list of ``PYTHON -m plugtrain ARGS``."""
    return [str(python), "-m", "plugtrain", *map(str, args)]


def run_plugtrain(
    *args: StrPath,
    cwd: StrPath | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = False,
    timeout: float = 300,
    python: StrPath = sys.executable,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m plugtrain ARGS`` and wait for it, output captured as text.

    :param prefix: interpreter options before ``-m plugtrain`` (e.g. ``-m torch.distributed.run``
        and its options).
    :param timeout: a hang guard, not a performance bound.
    """
    return subprocess.run(
        [str(python), *prefix, *plugtrain_command(*args, python=python)[1:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        timeout=timeout,
        check=check,
    )


def start_plugtrain(
    *args: StrPath, python: StrPath = sys.executable, **popen: Any
) -> subprocess.Popen[str]:
    """Start ``python -m plugtrain ARGS`` without waiting; stdout and stderr piped as text.

    ``popen`` is passed on to :class:`subprocess.Popen` (``env``, ``cwd``,
    ``start_new_session`` ...).
    """
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    options.update(popen)
    return subprocess.Popen(plugtrain_command(*args, python=python), **options)
