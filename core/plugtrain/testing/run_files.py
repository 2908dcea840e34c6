"""Write a run file and run ``plugtrain`` on it, from a test (no torch import).

:func:`trainer_run` builds a run file's mapping from its sections, :func:`write_run_file` writes
one as YAML, and :func:`run_plugtrain` runs a command line in this process (as
``plugtrain.cli.main``) or in a new one (``python -m plugtrain``) and gives back its exit status
and output::

    run = trainer_run(
        {"backend": {"backend_type": "CPU"}, "model": {"MLP": {...}}, "loop": {"max_steps": 2}},
        fit={"train_dataloader": {"Digits": {"batch_size": 8}}},
    )
    path = write_run_file(tmp_path, run)
    result = run_plugtrain("fit", path)
    assert result.status == 0, result.err
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

__all__ = ["PlugtrainResult", "run_plugtrain", "trainer_run", "write_run_file"]

StrPath = str | os.PathLike[str]


def trainer_run(init: Mapping[str, Any], **steps: Mapping[str, Any] | None) -> dict[str, Any]:
    """The mapping of a run file with one trainer: ``init`` and its steps by name.

    ``steps`` are ``fit``, ``validate`` and ``validate_all`` (as ``trainer_run(init, fit={...})``);
    one given as ``None`` is left out.
    """
    trainer: dict[str, Any] = {"init": dict(init)}
    trainer.update({name: dict(step) for name, step in steps.items() if step is not None})
    return {"trainer": trainer}


def write_run_file(where: StrPath, run: Mapping[str, Any] | str, name: str = "run.yaml") -> Path:
    """Write ``run`` (a mapping, or YAML text as it is) as a run file; return its path.

    ``where`` is a folder (created if needed; the file is ``name`` in it) or a path ending in
    ``.yaml`` or ``.yml``. Keys keep the order they were given in.
    """
    path = Path(where)
    if path.suffix not in (".yaml", ".yml"):
        path = path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = run if isinstance(run, str) else yaml.safe_dump(dict(run), sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


@attrs.frozen
class PlugtrainResult:
    """What a ``plugtrain`` command line did: its exit status, stdout and stderr."""

    status: int
    out: str
    err: str


def run_plugtrain(
    *args: StrPath,
    subprocess_run: bool = False,
    cwd: StrPath | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600.0,
) -> PlugtrainResult:
    """Run ``plugtrain ARGS`` and capture its exit status and output.

    By default in this process, through :func:`plugtrain.cli.main` (``cwd`` and ``env`` are not
    accepted then: they would change the whole process). With ``subprocess_run=True`` as
    ``python -m plugtrain ARGS`` in a new process, in ``cwd`` with ``env`` (default: this
    process's environment); ``timeout`` seconds guard against a hang.
    """
    words = [os.fspath(arg) for arg in args]
    if subprocess_run:
        done = subprocess.run(
            [sys.executable, "-m", "plugtrain", *words],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=None if env is None else dict(env),
            timeout=timeout,
            check=False,
        )
        return PlugtrainResult(done.returncode, done.stdout, done.stderr)
    if cwd is not None or env is not None:
        message = "cwd and env apply to a new process: pass subprocess_run=True"
        raise ValueError(message)
    from plugtrain.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(words)
        except SystemExit as exc:  # argparse: a bad command line, or --help
            status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    return PlugtrainResult(status, out.getvalue(), err.getvalue())
