"""Every loop of the C kernels marked "vectorized" is vectorized, for this CPU and for AVX2.

``kernels.c`` is compiled with the kernels' own flags (the first set the loader tries, for
``-march=native`` and ``-march=x86-64-v3``) and GCC's vectorizer report. A marked loop passes
when the report says a loop within it (from its ``for`` line to its closing brace: an OpenMP
loop is reported at its body's first statement) was vectorized and gives no reason why one was
not: a copy the compiler made for an invariant condition that stays scalar is reported there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from plugtrain_optimizers import _native

MARK = "/* vectorized */"
REPORT = re.compile(r"kernels\.c:(\d+):\d+: (optimized|missed): (.*)")
# Reasons that concern other attempts at the same place (a smaller vector size, a remainder
# loop), not whether the loop itself is vectorized.
HARMLESS = ("vectorization is not profitable", "iteration count")


def _marked_loops(source: str) -> dict[int, int]:
    """Each marked loop's ``for`` line -> its closing brace's line."""
    lines = source.splitlines()
    loops = {}
    for number, line in enumerate(lines, start=1):
        if MARK not in line:
            continue
        assert line.lstrip().startswith("for ("), f"line {number}: the mark is on a for line"
        depth = 0
        for end, text in enumerate(lines[number - 1 :], start=number):
            depth += text.count("{") - text.count("}")
            if depth == 0:
                loops[number] = end
                break
    return loops


@pytest.fixture(scope="module")
def gcc() -> str:
    """GCC (its report's format); skipped on a machine without it."""
    try:
        compiler = _native._compiler()
    except RuntimeError as exc:
        pytest.skip(f"no C compiler here: {exc}")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    if "Free Software Foundation" not in version.stdout:
        pytest.skip(f"{compiler} is not GCC: its vectorizer report reads differently")
    return compiler


def _report(compiler: str, march: str, tmp_path: Path) -> list[tuple[int, str, str]]:
    flags = [*_native._FLAGS, *_native.flag_sets(march)[0]]
    command = [compiler, *flags, "-fopt-info-vec-optimized", "-fopt-info-vec-missed"]
    command += [str(_native._SOURCE), "-o", str(tmp_path / "kernels.so"), "-lm"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0 and march != "native" and "march" in result.stderr:
        pytest.skip(f"{compiler} does not build for -march={march} here")
    assert result.returncode == 0, result.stderr[-2000:]
    found = []
    for line in result.stderr.splitlines():
        match = REPORT.search(line)
        if match:
            found.append((int(match[1]), match[2], match[3]))
    return found


@pytest.mark.slow  # a compilation with the report: a few seconds each
@pytest.mark.parametrize("march", ["native", "x86-64-v3"])
def test_every_marked_loop_is_vectorized(gcc, march, tmp_path):
    source = _native._SOURCE.read_text(encoding="utf-8")
    loops = _marked_loops(source)
    assert len(loops) >= 15  # every elementwise kernel's loop and Adafactor's
    report = _report(gcc, march, tmp_path)
    failures = []
    for first, last in loops.items():
        within = [(kind, text) for line, kind, text in report if first <= line <= last]
        if not any(kind == "optimized" and "loop vectorized" in text for kind, text in within):
            failures.append(f"line {first}: not vectorized")
        reasons = [
            text
            for kind, text in within
            if kind == "missed"
            and text.startswith("not vectorized")
            and not any(h in text for h in HARMLESS)
        ]
        if reasons:
            failures.append(f"line {first}: {'; '.join(sorted(set(reasons)))}")
    assert not failures, f"-march={march}:\n" + "\n".join(failures)


@pytest.mark.slow
def test_the_check_sees_a_loop_that_is_not_vectorized(gcc, tmp_path, monkeypatch):
    """Rprop's 0/1 factor as a selected constant: the compiler moves the product into two
    branches, which it may not merge again under the default -ftrapping-math (a product may
    trap), and the loop stays scalar on AVX2: the test says so."""
    source = _native._SOURCE.read_text(encoding="utf-8")
    scalar = source.replace(
        "const float kept = gi * (float)(1 - flipped);",
        "const float kept = gi * (flipped ? 0.0f : 1.0f);",
    )
    assert scalar != source
    broken = tmp_path / "kernels.c"
    broken.write_text(scalar, encoding="utf-8")
    monkeypatch.setattr(_native, "_SOURCE", broken)
    with pytest.raises(AssertionError, match=r"line \d+: .*control flow in loop"):
        test_every_marked_loop_is_vectorized(gcc, "x86-64-v3", tmp_path)
