"""The small pieces of a decoder: norms, activations, rotary and ALiBi positions, masks.

The formulas are Model Zoo's: RMSNorm in float32, exact (erf) GELU, RoPE on
interleaved pairs of the first ``rotary_dim`` dims of each head, ALiBi's slope list.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional

__all__ = [
    "RMSNorm",
    "activation",
    "alibi_slopes",
    "allowed_keys",
    "apply_rotary",
    "cached_allowed_keys",
    "causal_bias",
    "make_norm",
    "rotary_angles",
    "rotary_phases",
    "sinusoidal_table",
    "soft_cap",
]


class _RMSNormFunction(torch.autograd.Function):
    """:class:`RMSNorm`'s forward and a backward written for it, all in float32.

    Autograd through the forward's five operations saves four tensors and makes about nine
    passes over the input's size in backward; this one saves ``x_hat = x r`` and ``r`` and
    makes five: ``p = g x_hat``, ``dw = sum(p)``, ``mean(g w x_hat) = (p . w) / H`` (a
    matrix-vector product), ``dx = r (g w) - x_hat r mean(g w x_hat)`` (the last two in place).
    """

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """``w * x * rsqrt(mean(x^2) + eps)`` in float32, returned in ``hidden``'s dtype."""
        wide = hidden.float()
        scale = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
        normed = wide * scale
        ctx.save_for_backward(normed, scale, weight)
        ctx.dtype = hidden.dtype
        return (weight.float() * normed).to(hidden.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """The gradients of the input and the weight."""
        normed, scale, weight = ctx.saved_tensors
        grad = grad.float()
        product = grad * normed
        weight_grad = None
        if ctx.needs_input_grad[1]:
            batch_dims = tuple(range(grad.dim() - 1))
            weight_grad = product.sum(batch_dims).to(weight.dtype)
        hidden_grad = None
        if ctx.needs_input_grad[0]:
            wide_weight = weight.float()
            mean = torch.matmul(product, wide_weight).unsqueeze(-1).div_(normed.shape[-1])
            hidden_grad = torch.mul(grad, wide_weight).mul_(scale)
            hidden_grad.addcmul_(normed, mean.mul_(scale), value=-1)
            hidden_grad = hidden_grad.to(ctx.dtype)
        return hidden_grad, weight_grad, None


class RMSNorm(nn.Module):
    """``w * x * rsqrt(mean(x^2) + eps)``, computed in float32, weight only."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension."""
        out: torch.Tensor = _RMSNormFunction.apply(hidden, self.weight, self.eps)
        return out


_CAP_BLOCK_ELEMENTS = 1 << 20
"""Logits soft-capped at once: a block's three passes stay in the cache."""


class _SoftCap(torch.autograd.Function):
    """:func:`soft_cap` with its input's memory reused for the input's gradient."""

    @staticmethod
    def forward(ctx: Any, raw: torch.Tensor, cap: float) -> torch.Tensor:
        """``cap * tanh(raw / cap)``, a block of rows at a time; keeps ``raw``."""
        raw = raw.contiguous()
        out = torch.empty_like(raw)
        rows = max(1, _CAP_BLOCK_ELEMENTS // raw.shape[-1])
        for block, target in zip(_rows(raw).split(rows), _rows(out).split(rows), strict=True):
            torch.div(block, cap, out=target).tanh_().mul_(cap)
        ctx.save_for_backward(raw)
        ctx.cap = cap
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """``grad * (1 - tanh(raw / cap)^2)``, written over ``raw``."""
        (raw,) = ctx.saved_tensors
        out = raw.detach()
        rows = max(1, _CAP_BLOCK_ELEMENTS // raw.shape[-1])
        pairs = zip(_rows(out).split(rows), _rows(grad).split(rows), strict=True)
        for target, upstream in pairs:
            squared = target.div_(ctx.cap).tanh_().square_()
            torch.mul(upstream, squared.neg_().add_(1.0), out=target)
        return out, None


def _rows(tensor: torch.Tensor) -> torch.Tensor:
    """``[..., V]`` as ``[N, V]``."""
    return tensor.reshape(-1, tensor.shape[-1])


def soft_cap(raw: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(raw / cap)`` of logits that nothing else uses (Gemma 2's final cap).

    The values of the three operations; without their three tensors and their backward's
    three more, each of the logits' size: the backward writes the gradient over ``raw``, so
    ``raw`` must be a tensor only this function reads (a head's fresh output). A second
    backward through it then fails instead of being wrong.
    """
    out: torch.Tensor = _SoftCap.apply(raw, cap)
    return out


def make_norm(norm_type: str, width: int, eps: float) -> nn.Module:
    """The norm ``norm_type`` names: layernorm, rmsnorm or biasless-layernorm."""
    if norm_type == "rmsnorm":
        return RMSNorm(width, eps)
    return nn.LayerNorm(width, eps=eps, bias=norm_type == "layernorm")


def _squared_relu(x: torch.Tensor) -> torch.Tensor:
    return torch.square(functional.relu(x))


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x)


def _tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return functional.gelu(x, approximate="tanh")


_ACTIVATIONS: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": functional.gelu,
    "relu": functional.relu,
    "silu": functional.silu,
    "swish": functional.silu,
    "gelu_new": _tanh_gelu,
    "gelu_fast": _tanh_gelu,
    "quick_gelu": _quick_gelu,
    "squared_relu": _squared_relu,
    "linear": lambda x: x,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": functional.leaky_relu,
    "relu6": functional.relu6,
    "elu": functional.elu,
    "selu": functional.selu,
    "mish": functional.mish,
}


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function ``name`` stands for (``gelu`` is the exact erf form)."""
    return _ACTIVATIONS[name]


def rotary_angles(
    positions: torch.Tensor, rotary_dim: int, theta: float, scaling: str, factor: float,
    extra: Mapping[str, Any],
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``cos`` and ``sin`` of ``t * inv_freq_i`` for ``positions`` (any shape), float32.

    ``linear`` scaling divides t by ``factor``; ``llama3`` remaps the frequencies instead.
    """
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    inv_freq = 1.0 / (theta**exponents)
    t = positions.float()
    if scaling == "llama3":
        inv_freq = _llama3_frequencies(inv_freq, factor, extra)
    elif factor != 1.0:
        t = t / factor
    angles = t.unsqueeze(-1) * inv_freq.to(t.device)
    return angles.cos(), angles.sin()


def rotary_phases(
    positions: torch.Tensor, rotary_dim: int, theta: float, scaling: str, factor: float,
    extra: Mapping[str, Any],
) -> torch.Tensor:  # fmt: skip
    """``cos + i sin`` of :func:`rotary_angles` (same arguments), complex64 ``[..., r/2]``.

    What :func:`apply_rotary` multiplies each pair by: one complex product per pair is the
    rotation's four products and two sums, in one pass over the pairs.
    """
    cos, sin = rotary_angles(positions, rotary_dim, theta, scaling, factor, extra)
    return torch.complex(cos, sin)


def _llama3_frequencies(
    inv_freq: torch.Tensor, factor: float, extra: Mapping[str, Any]
) -> torch.Tensor:
    low = float(extra["low_freq_factor"])
    high = float(extra["high_freq_factor"])
    original = float(extra["original_max_position_embeddings"])
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    result = torch.where(wavelength > original / low, inv_freq / factor, blended)
    return torch.where(wavelength < original / high, inv_freq, result)


def apply_rotary(x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs ``(2i, 2i+1)`` of the first ``rotary_dim`` dims of each head.

    Pair ``(a, b)`` becomes ``(a cos - b sin, b cos + a sin)``, computed in float32 as the
    complex product ``(a + ib)(cos + i sin)``. Its gradient is the inverse rotation of the
    output's (the product with ``cos - i sin``), computed the same way: no zero-filled
    gradient of the rotated slice and of the rest to add up when only part of a head turns.

    :param x: ``[B, S, heads, d]``.
    :param phases: ``[S, r/2]`` or ``[B, S, r/2]`` (from :func:`rotary_phases`).
    """
    out: torch.Tensor = _Rotary.apply(x, phases)
    return out


class _Rotary(torch.autograd.Function):
    """:func:`apply_rotary`, whose backward rotates the gradient back."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
        """``x`` rotated by ``phases``; keeps the phases."""
        ctx.save_for_backward(phases)
        return _rotate(x, phases)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient rotated by the conjugate phases."""
        (phases,) = ctx.saved_tensors
        return _rotate(grad, phases.conj_physical()), None


def _rotate(x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
    """The first ``2 * phases.shape[-1]`` dims of each head of ``x`` times ``phases``."""
    half = phases.shape[-1]
    whole = 2 * half == x.shape[-1]
    turned = x if whole else x[..., : 2 * half]
    wide = turned.float()
    if wide.stride(-1) != 1 or any(stride % 2 for stride in wide.stride()[:-1]):
        wide = wide.contiguous()
    pairs = torch.view_as_complex(wide.unflatten(-1, (half, 2)))
    if whole:
        return torch.view_as_real(pairs * phases.unsqueeze(-2)).flatten(-2).to(x.dtype)
    # the rest of each head as it is: one copy of the whole (contiguous runs), then the turned
    # dims overwritten (in float32, the product written there directly)
    out = x.clone(memory_format=torch.contiguous_format)
    turned_out = out[..., : 2 * half]
    if out.dtype == torch.float32 and out.shape[-1] % 2 == 0:
        target = torch.view_as_complex(turned_out.unflatten(-1, (half, 2)))
        torch.mul(pairs, phases.unsqueeze(-2), out=target)
    else:
        turned_out.copy_(torch.view_as_real(pairs * phases.unsqueeze(-2)).flatten(-2))
    return out


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's slopes for ``heads`` heads (Press et al.'s geometric sequence, as Model Zoo)."""

    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start * start**j for j in range(n)]

    if math.log2(heads).is_integer():
        return powers(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return powers(closest) + powers(2 * closest)[0::2][: heads - closest]


def allowed_keys(length: int, window: int | None, sinks: int, device: torch.device) -> torch.Tensor:
    """``[S, S]`` bool: key k is visible to query q (causal, window, sink exemption)."""
    query = torch.arange(length, device=device).unsqueeze(1)
    key = torch.arange(length, device=device).unsqueeze(0)
    allowed = key <= query
    if window is not None:
        allowed &= (query - key <= window - 1) | (key < sinks)
    return allowed


def cached_allowed_keys(
    positions: torch.Tensor, valid: torch.Tensor, count: int, window: int | None, sinks: int
) -> torch.Tensor:
    """``[B, S, K]`` bool: which cached key each of the last ``count`` slots' queries sees.

    :param positions: ``[B, K]`` the cached tokens' positions (their rows' own count).
    :param valid: ``[B, K]`` false for padding, which only attends to itself.
    The rule is :func:`allowed_keys`' (causal, window, sinks) on positions, over slots.
    """
    keys = positions.shape[1]
    slot_q = torch.arange(keys - count, keys, device=positions.device).view(-1, 1)
    slot_k = torch.arange(keys, device=positions.device).view(1, -1)
    allowed = (slot_k <= slot_q).unsqueeze(0) & valid.unsqueeze(1)
    if window is not None:
        query, key = positions[:, -count:].unsqueeze(2), positions.unsqueeze(1)
        allowed &= (query - key <= window - 1) | (key < sinks)
    return allowed | (slot_k == slot_q).unsqueeze(0)


def causal_bias(length: int, device: torch.device) -> torch.Tensor:
    """The additive causal mask ``[1, 1, S, S]``: 0 where allowed, -inf elsewhere."""
    allowed = allowed_keys(length, None, 0, device)
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, float("-inf"))[
        None, None
    ]


def sinusoidal_table(positions: int, width: int) -> torch.Tensor:
    """The fixed position table of Vaswani et al.: sin on even dims, cos on odd ones."""
    position = torch.arange(positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))
    table = torch.zeros(positions, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : width // 2]
    return table
