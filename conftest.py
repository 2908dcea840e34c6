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

# The test files that cost the most: seconds their tests took in a whole-suite run on 2 loaded
# cores (rounded; only the order matters). With ``--dist loadfile`` a file is one unit of work;
# started last, a long file leaves the other core idle until it ends. These go first
# (``--no-loadscope-reorder`` keeps this order), the rest in collection order. A file that grows
# past half a minute belongs here.
HEAVY_FILES = {
    "tests/integration/test_scaffold.py": 280,
    "tests/test_run_cli.py": 180,
    "tests/train/data/test_sample_order.py": 170,
    "tests/reliability/test_fuzz_run_files.py": 150,
    "tests/builtin/test_gpt.py": 150,
    "plugins/models/tests/test_encoders_modelzoo_files.py": 130,
    "tests/reliability/test_plugin_isolation.py": 130,
    "tests/train/distributed/test_sharded.py": 120,
    "plugins/models/tests/test_dpo_lora.py": 110,
    "tests/reliability/test_signals.py": 110,
    "tests/train/distributed/test_multi_node.py": 90,
    "tests/reliability/test_resume_bookkeeping.py": 90,
    "tests/reliability/test_interrupted_runs.py": 80,
    "tests/integration/test_third_party_scheduler.py": 70,
    "tests/integration/test_third_party_sparsity.py": 60,
    "tests/config/test_plan.py": 50,
    "tests/modelzoo/test_modelzoo_keys.py": 40,
    "tests/train/distributed/test_distributed.py": 40,
    "tests/reliability/test_validate_runs.py": 40,
    "tests/cli/test_listing_cache.py": 40,
    "tests/train/checkpointing/storage/test_integrity.py": 40,
    "tests/integration/test_third_party_plugin.py": 40,
    "tests/integration/test_core_versions.py": 40,
    "tests/reliability/test_migration_edges.py": 40,
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
