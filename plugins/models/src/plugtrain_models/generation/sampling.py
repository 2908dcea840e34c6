"""Model Zoo's sampling rules: greedy unless a temperature, top-k or top-p is set.

When sampling: ``logits / temperature`` (1 when unset), softmax, the ``top_k`` most likely
tokens (``min(100, vocab)`` when unset), then of those the smallest most-likely prefix whose
probability reaches ``top_p`` of theirs (1 when unset), and one uniform draw per row picks from
what is left by its cumulative probability (Model Zoo's ``FusedTopK`` then ``FusedTopP``).
"""

from __future__ import annotations

import attrs
import torch

__all__ = ["DEFAULT_TOP_K", "Sampling"]

DEFAULT_TOP_K = 100
"""Model Zoo's top-k when sampling and ``top_k`` is unset."""


def _positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


@attrs.frozen
class Sampling:
    """How the next token is chosen; all ``None``: greedy (``argmax``)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None

    def __attrs_post_init__(self) -> None:
        _positive("temperature", self.temperature)
        _positive("top_k", self.top_k)
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be in [0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """Whether no sampling key is set (Model Zoo then takes the ``argmax``)."""
        return self.temperature is None and self.top_k is None and self.top_p is None

    def pick(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The next token of each row of ``logits`` ``[B, V]``: ``[B]`` ids.

        Sampling draws exactly one uniform number per row from ``generator``.
        """
        if self.greedy:
            return logits.argmax(-1)
        probabilities = torch.softmax(logits.float() / (self.temperature or 1.0), dim=-1)
        k = min(self.top_k or DEFAULT_TOP_K, logits.shape[-1])
        top, indices = probabilities.topk(k, dim=-1)
        cumulative = top.cumsum(-1)
        threshold = (1.0 if self.top_p is None else self.top_p) * cumulative[..., -1:]
        keep = (cumulative - top) < threshold
        keep[..., 0] = True
        cdf = (top * keep).cumsum(-1)
        uniform = torch.rand(logits.shape[0], generator=generator).to(logits.device)
        chosen = (cdf < (uniform * cdf[..., -1]).unsqueeze(-1)).sum(-1).clamp(max=k - 1)
        return indices.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
