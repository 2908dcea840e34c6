"""Settings of every test session, for all test paths (``tests/`` and each plugin's ``tests/``).

pytest-xdist runs one worker per core. Each worker's torch on one intra-op thread (and each
process a test starts, which inherits the setting) keeps the workers from oversubscribing the
cores: with several threads per worker, every parallel region of a step waits for a thread the
other worker's process has descheduled, and the suite runs several times slower. A test that is
about threads sets its own count; ``OMP_NUM_THREADS`` set outside is kept.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test files that cost the most, in CPU-seconds (measured one file at a time, rounded). With
# ``--dist loadfile`` a file is one unit of work; started last, a long file leaves the other core
# idle until it ends. These go first (``--no-loadscope-reorder`` keeps this order), the rest in
# collection order. A file that grows past half a minute belongs here.
HEAVY_FILES = {
    "tests/integration/test_scaffold.py": 65,
    "tests/train/distributed/test_sharded.py": 65,
    "tests/train/data/test_sample_order.py": 55,
    "plugins/models/tests/test_encoders_modelzoo_files.py": 50,
    "tests/reliability/test_plugin_isolation.py": 40,
    "tests/test_run_cli.py": 40,
    "plugins/models/tests/test_dpo_lora.py": 40,
    "tests/train/distributed/test_multi_node.py": 40,
    "tests/reliability/test_interrupted_runs.py": 25,
    "tests/reliability/test_validate_runs.py": 25,
    "tests/reliability/test_resume_bookkeeping.py": 25,
    "tests/train/checkpointing/storage/test_integrity.py": 22,
    "tests/reliability/test_broken_plugins.py": 20,
    "tests/reliability/test_signals.py": 20,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of the heaviest files first, each file's tests in their own order."""
    root = config.rootpath

    def cost(item: pytest.Item) -> int:
        try:
            name = item.path.relative_to(root).as_posix()
        except ValueError:  # a test outside the repository
            return 0
        return -HEAVY_FILES.get(name, 0)

    items.sort(key=cost)
