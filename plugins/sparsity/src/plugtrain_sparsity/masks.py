"""Mask arithmetic shared by the algorithms: top-k masks and balance groups (torch)."""

from __future__ import annotations

import attrs
import torch

__all__ = ["Balance", "kept_count", "topk_mask"]


def kept_count(sparsity: float, elements: int) -> int:
    """How many of ``elements`` a level of ``sparsity`` keeps: ``trunc((1 - s) * n)``."""
    return max(0, min(elements, int((1.0 - sparsity) * elements)))


def topk_mask(score: torch.Tensor, k: int) -> torch.Tensor:
    """True at the ``k`` highest scores of each row of the 2-D ``score``."""
    mask = torch.zeros_like(score, dtype=torch.bool)
    k = min(k, score.shape[-1])
    if k > 0:
        mask.scatter_(-1, torch.topk(score, k, dim=-1, sorted=False).indices, True)
    return mask


@attrs.frozen
class Balance:
    """How a tensor is split into equal groups that are sparsified alike (RigL's balancing).

    :param groups: the number of groups (1: the whole tensor is one group).
    :param transpose: balance over input columns (``balance_in_groups``): a 2-D ``[out, in]``
        weight is transposed to ``[in, out]`` before it is split; else contiguous output rows
        (``balance_out_groups``).
    """

    groups: int = 1
    transpose: bool = False

    def view(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` as ``[groups, elements per group]``."""
        source = tensor.t() if self.transpose else tensor
        return source.reshape(self.groups, -1)

    def unview(self, grouped: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """The inverse of :meth:`view`, back to ``shape``."""
        if self.transpose:
            return grouped.reshape(shape[1], shape[0]).t().contiguous()
        return grouped.reshape(shape)
