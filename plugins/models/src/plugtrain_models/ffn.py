"""The feed-forward network of a decoder layer, dense or a mixture of experts.

Dense, as Model Zoo's: ``ffn.ffn.0.linear_layer`` (+ ``linear_layer_for_glu``, which
carries the activation), then ``ffn.ffn.1.linear_layer``, then dropout. MoE: a router
``ffn.gate`` chooses ``top_k`` of ``ffn.experts.experts.E`` per token (each expert runs once, on
its tokens gathered into one block: :func:`route`); shared experts
``ffn.experts.shared_experts.S`` always run.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.layers import activation
from plugtrain_models.settings import DecoderSettings, MoESettings

__all__ = [
    "Experts",
    "FFNLayer",
    "FeedForward",
    "MixtureOfExperts",
    "RouterStats",
    "load_balancing_loss",
    "make_ffn",
    "route",
]

RouterStats = tuple[torch.Tensor, torch.Tensor]
"""A MoE layer's float32 router probabilities and its top-k indicator, both ``[B, S, E]``."""


class FFNLayer(nn.Module):
    """One FFN layer: ``linear_layer``, and for a GLU also ``linear_layer_for_glu``."""

    def __init__(
        self, width_in: int, width_out: int, bias: bool, act: str | None, glu: bool
    ) -> None:
        super().__init__()
        self.linear_layer = nn.Linear(width_in, width_out, bias=bias)
        if glu:
            self.linear_layer_for_glu = nn.Linear(width_in, width_out, bias=bias)
        self.glu = glu
        self.act = activation(act) if act is not None else None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """``act(W x + b)``, or ``act(W_glu x + b_glu) * (W x + b)`` for a GLU."""
        out: torch.Tensor = self.linear_layer(hidden)
        if self.glu:
            assert self.act is not None
            return self.act(self.linear_layer_for_glu(hidden)) * out
        return self.act(out) if self.act is not None else out


def _stack(s: DecoderSettings) -> nn.Sequential:
    """The two FFN layers of width ``filter_size``, as ``0`` and ``1``."""
    return nn.Sequential(
        FFNLayer(s.hidden_size, s.filter_size, s.ffn_bias, s.activation, s.glu),
        FFNLayer(s.filter_size, s.hidden_size, s.ffn_bias, None, glu=False),
    )


class FeedForward(nn.Module):
    """A dense FFN: ``ffn`` (the two layers), then dropout."""

    def __init__(self, settings: DecoderSettings) -> None:
        super().__init__()
        self.ffn = _stack(settings)
        self.dropout = nn.Dropout(settings.dropout)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, RouterStats | None]:
        """The FFN's output, and no router statistics."""
        return self.dropout(self.ffn(hidden)), None


class Experts(nn.Module):
    """The routed experts (``experts.E``, each the two FFN layers) and the shared ones."""

    def __init__(self, settings: DecoderSettings, moe: MoESettings) -> None:
        super().__init__()
        self.experts = nn.ModuleList(_stack(settings) for _ in range(moe.num_experts))
        if moe.num_shared_experts:
            self.shared_experts = nn.ModuleList(
                FeedForward(settings) for _ in range(moe.num_shared_experts)
            )


class MixtureOfExperts(nn.Module):
    """Top-k routing with float32 softmax; weights normalised over the chosen experts."""

    def __init__(self, settings: DecoderSettings, moe: MoESettings) -> None:
        super().__init__()
        self.gate = nn.Linear(settings.hidden_size, moe.num_experts, bias=moe.router_use_bias)
        self.experts = Experts(settings, moe)
        self.moe = moe
        self.dropout = nn.Dropout(settings.dropout)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, RouterStats | None]:
        """The weighted sum of the chosen experts plus the shared ones, and the router stats."""
        probabilities = torch.softmax(self.gate(hidden).float(), dim=-1)
        chosen, indices = probabilities.topk(self.moe.top_k, dim=-1)
        if self.moe.normalize:
            chosen = chosen / (chosen.sum(-1, keepdim=True) + self.moe.null_expert_bias)
        indicator = torch.zeros_like(probabilities).scatter(-1, indices, 1.0)
        flat = hidden.reshape(-1, hidden.shape[-1])
        routed = route(flat, chosen.reshape(-1), indices.reshape(-1), self.experts.experts)
        out = routed.view_as(hidden)
        for shared in getattr(self.experts, "shared_experts", ()):
            out = out + shared.ffn(hidden)
        return self.dropout(out), (probabilities, indicator)


def route(
    tokens: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, modules: nn.ModuleList
) -> torch.Tensor:
    """``sum_j weights[t, j] * modules[experts[t, j]](tokens[t])`` for every token ``t``.

    The (token, expert) pairs are grouped by expert (a stable sort), so each expert runs once
    on one contiguous block of its tokens and the weighted results go back with one
    ``index_add_``; each token adds its experts' results in expert order.

    :param tokens: ``[N, H]``.
    :param weights: ``[N * k]``, float32, the pairs' routing weights, token-major.
    :param experts: ``[N * k]``, the pairs' experts, in the same order.
    """
    if not len(tokens):
        return torch.zeros_like(tokens)
    order = experts.argsort(stable=True)
    owner = order // (experts.numel() // tokens.shape[0])  # each sorted pair's token
    counts = torch.bincount(experts, minlength=len(modules)).tolist()
    blocks = tokens[owner].split(counts)
    outputs = [module(block) for module, block in zip(modules, blocks, strict=True) if len(block)]
    weighted = torch.cat(outputs) * weights[order].unsqueeze(-1).to(tokens.dtype)
    return torch.zeros_like(tokens).index_add_(0, owner, weighted)


def make_ffn(settings: DecoderSettings) -> nn.Module:
    """The FFN of one layer: a mixture of experts when ``moe`` is on, else dense."""
    if settings.moe is not None:
        return MixtureOfExperts(settings, settings.moe)
    return FeedForward(settings)


def load_balancing_loss(stats: list[RouterStats], mask: torch.Tensor) -> torch.Tensor:
    """``E^2 * mean_{b,e}(T[b,e] P[b,e])``, T and P mask-weighted means averaged over layers.

    :param mask: the loss mask ``[B, S]``.
    """
    weight = mask.float().unsqueeze(-1)
    count = weight.sum(1).clamp_min(1.0)
    fractions = torch.stack([(w * weight).sum(1) / count for _, w in stats]).mean(0)
    probabilities = torch.stack([(p * weight).sum(1) / count for p, _ in stats]).mean(0)
    experts = fractions.shape[-1]
    return experts**2 * (fractions * probabilities).mean()
