"""Shared helpers of the reliability suite: the command line in-process and in subprocesses.

Imported as ``support.reliability`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from support.paths import REPO
from support.plugtrain_cli import run_plugtrain
from support.plugtrain_cli import start_plugtrain as _start

ROOT = REPO
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
HANG_GUARD_S = 60
"""Subprocesses are killed after this long: a guard against hangs, not a performance bound."""


@attrs.frozen
class Outcome:
    """What one ``plugtrain`` command did: exit status and both output streams."""

    status: int
    out: str
    err: str


def run_cli(*args: str) -> Outcome:
    """Run ``plugtrain ARGS`` in this process (``plugtrain.cli.main``), capturing its output."""
    from plugtrain.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return Outcome(status, out.getvalue(), err.getvalue())


def run_subprocess(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = HANG_GUARD_S,
) -> Outcome:
    """Run ``python -m plugtrain ARGS`` in a fresh interpreter (``timeout`` is a hang guard)."""
    done = run_plugtrain(*args, env=env, cwd=cwd, timeout=timeout)
    return Outcome(done.returncode, done.stdout, done.stderr)


def subprocess_env(**changes: str) -> dict[str, str]:
    """This process's environment with ``changes`` (and no plugin switches of the caller)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    env.update(changes)
    return env


_SINGLE = re.compile(r"plugtrain: error: (?!\d+ problems in the configuration:)(.*)")


def error_lines(err: str) -> list[str]:
    """The issue lines of a configuration error printed by the command line."""
    lines = err.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("plugtrain: error: "):
            continue
        single = _SINGLE.fullmatch(line)
        if single:
            return [single.group(1)]
        return [item[2:] for item in lines[index + 1 :] if item.startswith("  ")]
    return []


WHOLE_FILE_PROBLEMS = ("file is larger than",)
"""Problems of the file as a whole: positioned at the file, not at a line."""


def assert_positioned_config_error(outcome: Outcome, path: Path, text: str | bytes) -> None:
    """Exit 2, no traceback, and every issue starts with ``path:line:column`` inside the file."""
    assert outcome.status == 2, outcome
    assert "Traceback" not in outcome.err, outcome.err
    issues = error_lines(outcome.err)
    assert issues, outcome.err
    lines = (text.encode() if isinstance(text, str) else text).count(b"\n") + 1
    position = re.compile(re.escape(str(path)) + r":(\d+):(\d+): \S")
    whole_file = tuple(f"{path}: {problem}" for problem in WHOLE_FILE_PROBLEMS)
    for issue in issues:
        if issue.startswith(whole_file):
            continue
        found = position.match(issue)
        assert found, f"no position in {issue!r}"
        assert 1 <= int(found.group(1)) <= lines + 1, issue
        assert int(found.group(2)) >= 1, issue


def write_dist(
    site: Path,
    distribution: str,
    modules: dict[str, str],
    entry_points: Sequence[tuple[str, str]],
    version: str = "1.0",
) -> None:
    """Install a distribution by hand: its modules plus a ``*.dist-info`` that names them.

    ``importlib.metadata`` finds it like any installed package once ``site`` is on the path.
    """
    site.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source)
    folder = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    )
    lines = ["[plugtrain]", *(f"{name} = {value}" for name, value in entry_points)]
    (folder / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (folder / "RECORD").write_text("")


# -- real training runs ------------------------------------------------------------------------

TRAIN_RUN = """\
trainer:
  init:
    {backend}
    model_dir: {model_dir}
    seed: 3
    model:
      MLP: {{in_features: 64, hidden: {hidden}, out_features: 10, dropout: 0.1}}
    optimizer:
      SGD: {{lr: {lr}, momentum: 0.9}}
    schedulers:
      - LinearLR: {{initial_learning_rate: {lr}, end_learning_rate: 0.001, total_iters: 500}}
    loop: {{max_steps: {steps}}}
    checkpoint: {{steps: {every}}}
    logging: {{log_steps: {every}}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 16}}}}
"""


def write_train_run(
    folder: Path,
    *,
    steps: int,
    every: int,
    hidden: int = 16,
    lr: float | str = 0.05,
    backend: str = "device: CPU",
    plugins: Sequence[str] = (),
    **changes: str,
) -> Path:
    """A run file training an MLP on Digits into ``folder/model``; ``changes`` replace text."""
    folder.mkdir(parents=True, exist_ok=True)
    text = TRAIN_RUN.format(
        model_dir=folder / "model", steps=steps, every=every, hidden=hidden, lr=lr, backend=backend
    )
    if plugins:
        text = f"plugins: [{', '.join(plugins)}]\n" + text
    for old, new in changes.items():
        text = text.replace(old, new)
    path = folder / "run.yaml"
    path.write_text(text)
    return path


def start_plugtrain(*args: str, **popen: object) -> subprocess.Popen[str]:
    """``python -m plugtrain ARGS`` in its own session, output captured (not waited for)."""
    return _start(*args, start_new_session=True, **popen)


def finish_process(process: subprocess.Popen[str]) -> Outcome:
    """Wait for ``process`` (a hang guard, not a time limit) and collect its outcome."""
    try:
        out, err = process.communicate(timeout=HANG_GUARD_S * 4)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        raise
    return Outcome(process.returncode, out, err)


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    """Poll ``condition()`` every millisecond while ``process`` runs (hang-guarded)."""
    deadline = time.monotonic() + HANG_GUARD_S * 4
    while not condition():
        if process.poll() is not None:
            _out, err = process.communicate()
            message = f"the run ended before the moment came:\n{err[-3000:]}"
            raise AssertionError(message)
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.001)


def last_line(err: str) -> str:
    """The last line a command printed on stderr."""
    lines = err.strip().splitlines()
    return lines[-1] if lines else ""


def small_trainer(
    model_dir: Path,
    *,
    max_steps: int = 20,
    checkpoint_steps: int = 5,
    dropout: float = 0.1,
    **changes: object,
) -> Any:
    """A seeded Trainer of a small MLP with SGD on 16 features and 4 classes, in ``model_dir``.

    Pairs with :func:`small_data`; ``changes`` replace any Trainer argument.
    """
    import plugtrain
    from plugtrain.builtin.models import MLP
    from plugtrain.train.trainer import Trainer

    sgd = plugtrain.resolve("optimizer", "SGD")
    arguments: dict[str, object] = {
        "device": "CPU",
        "model_dir": model_dir,
        "model": lambda: MLP(in_features=16, out_features=4, hidden=32, dropout=dropout),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.05, momentum=0.9),
        "loop": {"max_steps": max_steps},
        "logging": {"log_steps": 1},
        "checkpoint": {"steps": checkpoint_steps},
        "seed": 3,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def small_data() -> Any:
    """128 synthetic examples of 16 features and 4 classes, in batches of 16."""
    from plugtrain.builtin.data import synthetic_loader

    return synthetic_loader(batch_size=16, num_examples=128, in_features=16, num_classes=4)


@contextlib.contextmanager
def tmpfs(tmp_path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs mount of ``size`` (skips when this machine does not allow mounting)."""
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)
