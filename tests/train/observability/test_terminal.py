"""What a person sees at an 80-column terminal: the run summary and a progress bar that fits.

``plugtrain fit`` runs in a real pseudo-terminal of 80 columns (``pty``); its screen output is
read back and checked: the summary line before the first step, and every state of the bar
within 80 columns with step/total, rate, time left, loss and lr to 4 significant digits.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from support.paths import EXAMPLES

EXAMPLE = EXAMPLES / "quickstart.yaml"
BAR = re.compile(r"(\d+)/(\d+) \|.{16}\| .+ eta \S+(, loss (\S+) lr (\S+))?$")


def _run_in_terminal(arguments: list[str], cwd: Path, columns: int = 80) -> str:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    environment = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    process = subprocess.Popen(
        [sys.executable, "-m", "plugtrain", *arguments],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=cwd,
        env=environment,
        close_fds=True,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def _screen_lines(output: str) -> list[str]:
    """Each state a line of the screen took: split at newlines and carriage returns."""
    cleaned = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", output)
    return [part for line in cleaned.split("\n") for part in line.split("\r") if part.strip()]


@pytest.mark.slow
def test_the_fit_summary_and_the_bar_fit_80_columns(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "run.yaml")
    output = _run_in_terminal(
        ["fit", "run.yaml", "--set", "trainer.init.loop.max_steps=120"], tmp_path
    )
    lines = _screen_lines(output)
    summary = [line for line in lines if line.startswith("plugtrain: fit: ")]
    assert len(summary) == 1, lines
    assert re.search(r"MLP \d+(\.\d+)?k parameters; batch 64 per process; float32; ", summary[0])
    assert "steps 0 -> 120; writes runs/quickstart" in summary[0]
    bars = [line for line in lines if BAR.search(line)]
    assert bars, lines
    assert max(len(line) for line in bars) <= 80, max(bars, key=len)
    final = BAR.search(bars[-1])
    assert final is not None
    assert final.group(1) == final.group(2) == "120"
    loss, lr = final.group(4), final.group(5)
    assert loss is not None
    assert lr is not None
    assert len(loss.replace(".", "").lstrip("0")) <= 4  # 4 significant digits
    assert float(lr) == pytest.approx(0.1 - (0.1 - 0.005) * 120 / 600, rel=1e-3)  # not 0.00
    assert summary[0] in lines[: lines.index(bars[0])]  # said before the first step
