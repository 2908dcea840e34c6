"""A data loader with ``state_dict``/``load_state_dict`` resumes itself: nothing is replayed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from plugtrain.builtin.models import MLP
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


class Restartable:
    """Ten seeded batches per epoch; its state is the next batch's index; counts batches made."""

    def __init__(self) -> None:
        self.position = 0
        self.made = 0
        self.resumed_from: int | None = None

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        start, self.position = self.position, 0
        for index in range(start, 10):
            self.position = index + 1
            self.made += 1
            generator = torch.Generator().manual_seed(index)
            yield (
                torch.randn(4, 8, generator=generator),
                torch.randint(0, 3, (4,), generator=generator),
            )
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = self.resumed_from = int(state["position"])


def _trainer(model_dir: Path, steps: int) -> Trainer:
    return Trainer(
        device="CPU",
        model_dir=model_dir,
        model=lambda: MLP(in_features=8, out_features=3, hidden=8),
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        loop={"max_steps": steps},
        logging={"log_steps": 1, "progress": False},
        seed=0,
    )


def test_a_stateful_loader_is_restored_by_its_own_state_and_not_replayed(tmp_path):
    _trainer(tmp_path / "run", 4).fit(Restartable())
    straight = _trainer(tmp_path / "straight", 7)
    straight.fit(Restartable())
    loader = Restartable()
    resumed = _trainer(tmp_path / "run", 7)
    resumed.fit(loader)
    assert loader.resumed_from == 4
    assert loader.made == 3  # batches 5-7 only
    for name, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name
