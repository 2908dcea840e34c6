"""``Static``: a mask built once (``init_method``) that never changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from plugtrain_sparsity.init import make_init_method
from plugtrain_sparsity.masks import Balance

__all__ = ["Static"]


class Static:
    """Fixed sparsity: each parameter keeps ``trunc((1 - sparsity) * n)`` weights throughout.

    :param params: the group's ``(name, parameter)`` pairs.
    :param sparsity: the level, a number in ``[0, 1)`` (an int is taken as a float, as Model Zoo
        coerces it).
    :param init_method: ``random``, ``topk``, ``from_zeros``, ``checkerboard`` or a callable.
    :raises ValueError: for a level that is not a number or outside ``[0, 1)``.
    """

    def __init__(
        self,
        params: Sequence[tuple[str, torch.Tensor]],
        sparsity: Any,
        init_method: Any = "random",
    ) -> None:
        if isinstance(sparsity, bool) or not isinstance(sparsity, int | float):
            message = "Static sparsity algorithm only supports constant sparsity"
            raise ValueError(message)  # noqa: TRY004 - cstorch's exception
        level = float(sparsity)
        if not 0.0 <= level < 1.0:
            raise ValueError(f"Invalid sparsity level {level}. Must be 0.0 <= s < 1.0")
        self.params = list(params)
        self.sparsity = level
        self.init_method = make_init_method(init_method)

    def initial_masks(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """The ``init_method`` mask of each parameter at the level."""
        return {
            name: self.init_method(param, self.sparsity, Balance(), generator)
            for name, param in self.params
        }

    def advance(self, stepped: bool) -> bool:
        """Never an update step."""
        return False

    def update_masks(
        self,
        masks: Mapping[str, torch.Tensor],
        gradients: Mapping[str, torch.Tensor] | None,
        generator: torch.Generator,
    ) -> dict[str, torch.Tensor]:
        """Nothing changes."""
        return {}

    def target_sparsity(self) -> float:
        """The configured level."""
        return self.sparsity

    def state_dict(self) -> dict[str, Any]:
        """No state (``{}``, as cstorch)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""
