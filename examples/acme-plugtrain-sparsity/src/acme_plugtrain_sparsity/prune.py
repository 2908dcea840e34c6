"""``RandomPrune``: a :class:`plugtrain.protocols.SparsityAlgorithm` of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["RandomPrune"]


class RandomPrune:
    """Starts dense; every ``every`` steps prunes ``rate`` of the kept weights, at random.

    Never below ``trunc((1 - sparsity) * n)`` kept weights per parameter. The core masks the
    weights, gradients and optimizer state, saves the masks and hands over the generator (the
    same on every process), so this class only decides masks.
    """

    def __init__(
        self,
        params: Sequence[tuple[str, torch.Tensor]],
        sparsity: float,
        every: int = 10,
        rate: float = 0.5,
    ) -> None:
        self.params = list(params)
        self.sparsity = float(sparsity)
        self.every = every
        self.rate = rate
        self.step = 0
        self._level = 0.0

    def initial_masks(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """All kept: training starts dense."""
        return {name: torch.ones_like(p, dtype=torch.bool) for name, p in self.params}

    def advance(self, stepped: bool) -> bool:
        """Prune every ``every`` applied steps until the final level is reached."""
        self.step += 1
        return stepped and self.step % self.every == 0 and self._level < self.sparsity

    def update_masks(
        self,
        masks: Mapping[str, torch.Tensor],
        gradients: Mapping[str, torch.Tensor] | None,
        generator: torch.Generator,
    ) -> dict[str, torch.Tensor]:
        """Keep a random ``1 - rate`` of each parameter's kept weights (at least the floor)."""
        new = {}
        for name, _ in self.params:
            mask = masks[name]
            floor = int((1 - self.sparsity) * mask.numel())
            keep = max(floor, int(int(mask.sum()) * (1 - self.rate)))
            score = torch.rand(mask.shape, generator=generator, device=generator.device)
            score = torch.where(mask, score.to(mask.device), -1.0).flatten()
            chosen = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
            chosen[torch.topk(score, keep, sorted=False).indices] = True
            new[name] = chosen.reshape(mask.shape)
            self._level = 1 - keep / mask.numel()
        return new

    def target_sparsity(self) -> float:
        """The level of the last pruning (0 before the first)."""
        return self._level

    def state_dict(self) -> dict[str, Any]:
        """The step and the level reached."""
        return {"step": self.step, "level": self._level}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step and the level."""
        self.step = int(state["step"])
        self._level = float(state["level"])
