"""The optimizers' C kernels: only a library this user built is loaded, and a cache that cannot
be used leaves no folder behind.

A "planted" library is a real shared object whose constructor writes a marker file when it is
loaded, put in the cache under the name the kernels' library gets.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("plugtrain_optimizers")

from support.reliability import tmpfs

from plugtrain_optimizers import _kernel_cache, _native

PLANTED = """\
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("MARKER", "w");
    if (f) { fputs("ran", f); fclose(f); }
}
"""


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A C compiler (else skipped); the temporary folder is private to the test."""
    monkeypatch.delenv(_native.SWITCH_VARIABLE, raising=False)
    try:
        found = _native._compiler()
    except RuntimeError as exc:
        pytest.skip(f"the kernels cannot be built here: {exc}")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    yield found
    _native.reset()


def _plant(compiler: str, target: Path, marker: Path) -> None:
    source = target.parent.parent / "planted.c"
    source.write_text(PLANTED.replace("MARKER", str(marker)))
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(target)], check=True)


def _load(cache: Path, monkeypatch: pytest.MonkeyPatch) -> _native.NativeKernels | None:
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(cache))
    _native.reset()
    return _native.load()


@pytest.mark.slow
def test_x01_a_library_planted_in_the_cache_is_never_loaded(
    compiler: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    built = _load(cache, monkeypatch)
    assert built is not None, _native.status()
    library = built.path
    assert library.parent == cache / "kernels"
    assert oct(library.parent.stat().st_mode & 0o777) == "0o700"
    marker = tmp_path / "constructor-ran"
    # 1. a private cache, the file replaced: its digest differs, it is built again
    _plant(compiler, library, marker)
    again = _load(cache, monkeypatch)
    assert again is not None
    assert again.path == library
    assert not marker.exists()
    assert _kernel_cache.untrusted_library(library) is None  # the rebuilt one
    # 2. a cache others can write (its digest planted too), 3. one owned by another user
    for change in ("chmod", "chown"):
        _plant(compiler, library, marker)
        _kernel_cache.record_digest(library, library.name)
        if change == "chmod":
            os.chmod(cache / "kernels", 0o777)
            why = "can be written by its group or other users (drwxrwxrwx)"
        else:
            os.chmod(cache / "kernels", 0o700)
            os.chown(cache / "kernels", 4321, 4321)
            why = "is owned by another user (uid 4321)"
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="plugtrain"):
            loaded = _load(cache, monkeypatch)
        assert loaded is not None, _native.status()
        assert not marker.exists()
        assert loaded.path.parent.name.startswith("plugtrain-kernels-")
        warnings = [r.getMessage() for r in caplog.records]
        assert any("building the C kernels in a private temporary folder" in w and why in w
                   for w in warnings), warnings  # fmt: skip
        assert not list(Path(tempfile.gettempdir()).iterdir())  # the private folder is gone
        os.chown(cache / "kernels", os.getuid(), os.getgid())


@pytest.mark.slow
def test_x07_a_read_only_cache_leaves_no_temporary_folder(
    compiler: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with tmpfs(tmp_path, "1m") as disk:
        (disk / "kernels").mkdir(mode=0o700)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        for _ in range(2):  # two processes' worth of loads
            with caplog.at_level(logging.WARNING, logger="plugtrain"):
                loaded = _load(disk, monkeypatch)
            assert loaded is not None, _native.status()
            assert not list(Path(tempfile.gettempdir()).iterdir())
        assert "cannot be written (Read-only file system)" in caplog.text
    import torch

    import plugtrain

    params = [torch.nn.Parameter(torch.randn(40, 50, generator=torch.Generator().manual_seed(0)))]
    params[0].grad = torch.randn(40, 50, generator=torch.Generator().manual_seed(1))
    reference = [torch.nn.Parameter(params[0].detach().clone())]
    reference[0].grad = params[0].grad.clone()
    plugtrain.resolve("optimizer", "Lion")(params, lr=0.01).step()
    _native.set_enabled(False)
    plugtrain.resolve("optimizer", "Lion")(reference, lr=0.01).step()
    _native.set_enabled(True)
    torch.testing.assert_close(params[0], reference[0], atol=0, rtol=0)
