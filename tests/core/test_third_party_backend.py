"""A third party's backend launches two processes using only the documented API.

``tests/data/third_party_backend/acme_backend.py`` is a data-parallel CPU backend written from
docs/plugin-api.md: ``BackendBase``, a ``ParallelStrategy`` and ``plugtrain.launching``. It is
loaded as a local plugin (``-p``) by a real ``plugtrain fit``, which starts two processes with
torchrun; each rank reports what its strategy was asked.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from support.paths import DATA
from support.plugtrain_cli import run_plugtrain

HERE = DATA / "third_party_backend"
USED = {
    "plugtrain",
    "plugtrain.backend_base",
    "plugtrain.launching",
    "plugtrain.schema",
    "plugtrain.strategy",
}


def test_the_backend_imports_only_documented_modules() -> None:
    tree = ast.parse((HERE / "acme_backend.py").read_text(encoding="utf-8"))
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("plugtrain")
    }
    assert imported == USED


@pytest.mark.slow
def test_a_third_party_backend_runs_two_processes(tmp_path: Path) -> None:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "ACME_REPORT_DIR": str(tmp_path),
    }
    result = run_plugtrain(
        "-p",
        "acme_backend",
        "fit",
        str(HERE / "run.yaml"),
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in reports] == [2, 2]
    # 6 optimizer steps of 3 micro-batches: gradients reduced on the third of each only
    for report in reports:
        assert report["contexts"] == [False, False, True] * 6
    # the reduced gradients kept the two replicas equal
    assert reports[0]["weights"] == reports[1]["weights"]
    assert (tmp_path / "acme_run" / "checkpoint_6.mdl").is_file()
