"""Settings of every test session, for all test paths (``tests/`` and each plugin's ``tests/``).

pytest-xdist runs one worker per core. Each worker's torch on one intra-op thread (and each
process a test starts, which inherits the setting) keeps the workers from oversubscribing the
cores: with several threads per worker, every parallel region of a step waits for a thread the
other worker's process has descheduled, and the suite runs several times slower. A test that is
about threads sets its own count; ``OMP_NUM_THREADS`` set outside is kept.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
