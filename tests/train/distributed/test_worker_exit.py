"""The exit workaround of gloo workers: only when a backend asks, and atexit handlers still run.

Real processes: each case runs a small program in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """\
    import atexit
    import logging

    from plugtrain import launching as launch

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    atexit.register(print, "atexit handler ran", flush=True)
    if {ask}:
        launch.exit_after_atexit_handlers("test")
    with launch.exit_worker_when_done():
        print("work done", flush=True)
        logging.getLogger("plugtrain").info("logged before the exit")
    print("after the block", flush=True)
    """
)


def _run(ask: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM.format(ask=ask)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_worker_asked_to_skip_teardown_still_runs_its_atexit_handlers():
    done = _run(ask=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["work done", "atexit handler ran"]
    assert "logged before the exit" in done.stderr


def test_without_a_request_the_process_ends_as_usual():
    done = _run(ask=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["work done", "after the block", "atexit handler ran"]


def test_an_error_leaves_through_the_normal_path():
    program = PROGRAM.format(ask=True).replace(
        'print("work done", flush=True)', 'raise SystemExit("failed")'
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "failed" in done.stderr
    assert done.stdout.splitlines() == ["atexit handler ran"]


@pytest.mark.parametrize(
    ("version", "environ", "expected"),
    [
        ("2.13.0+cpu", {}, True),
        ("2.14.1", {}, True),
        ("2.12.1", {}, False),
        ("2.13.0", {"PLUGTRAIN_GLOO_EXIT_WORKAROUND": "0"}, False),
        ("2.5.0", {"PLUGTRAIN_GLOO_EXIT_WORKAROUND": "1"}, True),
        ("not a version", {}, False),
    ],
)
def test_the_workaround_is_confined_to_the_torch_versions_that_need_it(version, environ, expected):
    parallel = pytest.importorskip("plugtrain_backends._parallel")
    assert parallel.gloo_exit_workaround(version, environ) is expected
