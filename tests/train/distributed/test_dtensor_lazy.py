"""DTensors recognised without importing ``torch.distributed.tensor`` (a second of start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow  # a fresh interpreter: the suite's own has imported everything
def test_the_trainers_rooms_import_no_dtensor_module_and_a_plain_tensor_is_none() -> None:
    script = (
        "import sys, torch\n"
        "import plugtrain.train.loop, plugtrain.train.distributed as d\n"
        "assert 'torch.distributed.tensor' not in sys.modules, 'imported'\n"
        "assert not d.dtensor_state.is_dtensor(torch.ones(2))\n"
        "assert d.local_tensor(torch.ones(2)).sum() == 2\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
