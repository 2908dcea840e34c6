"""Two real processes (gloo) agree on skipping a step that is not finite (I14)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

NAN_STEP = 3


def _worker(rank: int, port: int, folder: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE="2",
    )
    import plugtrain
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.builtin.models import MLP
    from plugtrain.train.trainer import Trainer

    snapshots: dict[int, list[torch.Tensor]] = {}

    class Snapshot:
        def on_train_step_end(self, trainer: Any, metrics: Any) -> None:
            weights = trainer.unwrapped_model.parameters()
            snapshots[trainer.global_step] = [p.detach().clone() for p in weights]

    def loss(outputs: Any, targets: Any) -> Any:
        value = torch.nn.functional.cross_entropy(outputs, targets)
        if rank == 1 and trainer.global_step + 1 == NAN_STEP:
            value = value * float("nan")
        return value

    sgd = plugtrain.resolve("optimizer", "SGD")
    trainer = Trainer(
        backend={"backend_type": "CPU", "num_processes": 2, "dist_timeout": 30},
        model_dir=Path(folder) / "model",
        model=lambda: MLP(in_features=16, out_features=4, hidden=8),
        optimizer=lambda model: sgd(model.parameters(), lr=0.1),
        loop={"max_steps": 5, "nan_policy": "skip_step"},
        logging={"log_steps": 1},
        checkpoint={"steps": 100},
        callbacks=[Snapshot()],
        loss_fn=loss,
        seed=3,
    )
    trainer.fit(synthetic_loader(batch_size=8, num_examples=128, in_features=16, num_classes=4))
    torch.save(snapshots, Path(folder) / f"rank{rank}.pt")
    trainer.backend.close()


@pytest.mark.slow
def test_i14_two_processes_skip_a_step_that_is_not_finite_on_one_of_them(tmp_path: Path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for snapshots in ranks:
        assert sorted(snapshots) == [1, 2, 3, 4, 5]
        for step in snapshots:
            assert all(torch.isfinite(p).all() for p in snapshots[step]), step
        # both ranks dropped the update of the step (was: rank 0 took the NaN gradients)
        for before, after in zip(snapshots[NAN_STEP - 1], snapshots[NAN_STEP], strict=True):
            assert torch.equal(before, after)
        for before, after in zip(snapshots[NAN_STEP], snapshots[NAN_STEP + 1], strict=True):
            assert not torch.equal(before, after)
    for a, b in zip(ranks[0][5], ranks[1][5], strict=True):
        assert torch.equal(a, b)
