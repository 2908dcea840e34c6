"""One decoder layer for one new token per row, against a KV cache: the generation step.

:meth:`DecoderLayer.forward` computed as plain functions over the layer's own weights, for a
layer in eval mode. A :class:`LayerPlan` looks the layer's parts up once per cache (a stock
``nn.Linear`` becomes one ``mm``, :class:`RMSNorm` or ``nn.LayerNorm`` one fused call; any
other part, a LoRA layer say, stays its module, so it computes what it always does). A step
then skips what a single query in inference never needs: module calls, dropout, reshapes and
transposes (one token per row: hidden states are ``[B, H]``, queries ``[B, h, 1, d]``), the
causal mask (the one query is the newest key) and, for a sliding window without sinks or
padding, any mask at all (the keys are sliced to the window). RoPE rotates the new key in its
cache slot and the query in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.attention import Attention, LayerCache
from plugtrain_models.decode_fusion import fused_linear_step
from plugtrain_models.ffn import FeedForward, FFNLayer
from plugtrain_models.layers import RMSNorm, apply_rotary

__all__ = ["LayerPlan", "ffn_step", "head_step", "linear_step", "norm_step", "stock_layer"]

Step = Callable[[torch.Tensor], torch.Tensor]


def stock_layer(layer: nn.Module) -> bool:
    """Whether a :class:`LayerPlan` may compute ``layer`` (a ``DecoderLayer`` in eval mode)."""
    return not layer.training and type(layer.self_attn) is Attention


def _module(module: nn.Module) -> Step:
    def call(hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = module(hidden)
        return out

    return call


def linear_step(module: nn.Module) -> Step:
    """``module`` as a function of ``[B, in]``: one ``mm`` (``addmm``) for a stock ``nn.Linear``.

    The BLAS call ``F.linear`` makes for a 2-D input, without its dispatch and reshapes.
    """
    if type(module) is not nn.Linear:
        return _module(module)
    weight_t, bias = module.weight.t(), module.bias
    if bias is None:  # nn.Linear(bias=False) holds None
        return lambda hidden: torch.mm(hidden, weight_t)  # type: ignore[unreachable]
    return lambda hidden: torch.addmm(bias, hidden, weight_t)


def _rms_norm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``w * x * rsqrt(mean(x^2) + eps)`` for float32, with :class:`RMSNorm`'s operations.

    The values of ``torch.rms_norm`` bit for bit, in 19 ATen calls on CPU against its 24.
    """
    scale = hidden.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    return torch.mul(hidden, scale).mul_(weight)


def norm_step(module: nn.Module) -> Step:
    """``module`` as a function: one fused call for :class:`RMSNorm` and ``nn.LayerNorm``."""
    if type(module) is RMSNorm:  # in float32, as RMSNorm computes it
        weight, eps = module.weight.float(), module.eps
        shape: tuple[int, ...] = (weight.shape[0],)
        if module.weight.dtype == torch.float32:
            return lambda hidden: _rms_norm(hidden, weight, eps)
        return lambda hidden: torch.rms_norm(hidden.float(), shape, weight, eps).to(hidden.dtype)
    if type(module) is nn.LayerNorm:
        shape, weight, bias, eps = module.normalized_shape, module.weight, module.bias, module.eps
        return lambda hidden: functional.layer_norm(hidden, shape, weight, bias, eps)
    return _module(module)


def _ffn_layer_step(module: nn.Module, fuse: bool = False) -> Step:
    if type(module) is not FFNLayer:
        return _module(module)
    main, act = linear_step(module.linear_layer), module.act
    if module.glu:
        assert act is not None
        both = None
        if fuse:
            both = fused_linear_step([module.linear_layer_for_glu, module.linear_layer])
        if both is not None:
            width = module.linear_layer.out_features
            return lambda hidden: _glu(act, both(hidden), width)
        gate = linear_step(module.linear_layer_for_glu)
        return lambda hidden: act(gate(hidden)).mul_(main(hidden))
    if act is None:
        return main
    return lambda hidden: act(main(hidden))


def _glu(act: Step, both: torch.Tensor, width: int) -> torch.Tensor:
    """``act(gate) * up`` from the fused product ``[B, 2 * width]`` (gate first)."""
    return act(both[:, :width]).mul_(both[:, width:])


def ffn_step(module: nn.Module, fuse: bool = False) -> Step:
    """A layer's FFN without dropout: its two layers, or a mixture of experts' output.

    With ``fuse``, a GLU's two stock projections become one ``mm`` (:func:`fused_linear_step`).
    """
    if type(module) is FeedForward and len(module.ffn) == 2:
        first = _ffn_layer_step(module.ffn[0], fuse)
        second = _ffn_layer_step(module.ffn[1])
        return lambda hidden: second(first(hidden))

    def routed(hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = module(hidden)[0]
        return out

    return routed


def _rotate_(x: torch.Tensor, phases: torch.Tensor) -> None:
    """RoPE on ``x`` ``[..., d]`` (float32) in place; ``phases`` broadcast over its pairs."""
    half = phases.shape[-1]
    torch.view_as_complex(x[..., : 2 * half].unflatten(-1, (half, 2))).mul_(phases)


class LayerPlan:
    """One ``DecoderLayer``'s parts as functions, for :meth:`step` (built once per cache)."""

    fuse = True
    """Whether :meth:`step` computes projections that share an input as one product."""

    def __init__(self, layer: Any) -> None:
        attention: Attention = layer.self_attn
        self.heads, self.groups = attention.heads, attention.groups
        self.head_dim, self.scale, self.cap = attention.head_dim, attention.scale, attention.cap
        self.capped = attention._capped
        self.q = linear_step(attention.proj_q_dense_layer)
        self.k = linear_step(attention.proj_k_dense_layer)
        self.v = linear_step(attention.proj_v_dense_layer)
        self.o = linear_step(attention.proj_output_dense_layer)
        self.norm1 = norm_step(layer.norm1)
        self.norm3 = norm_step(layer.norm3) if hasattr(layer, "norm3") else None
        self.sandwich = layer.sandwich
        if layer.sandwich:
            self.norm1_post, self.norm3_post = (
                norm_step(layer.norm1_post),
                norm_step(layer.norm3_post),
            )
        self.parallel = layer.parallel
        self.ffn = ffn_step(layer.ffn)
        self.qkv: Step | None = None
        self._layer: Any = layer
        self._fused = False

    def _fuse(self) -> None:
        """Fuse the projections that share an input, for :meth:`step` (once, on its first call).

        With :attr:`fuse`, the query, key and value projections become one ``mm``, and so do a
        GLU's gate and up projections, where they are stock ``nn.Linear`` layers (a LoRA layer
        keeps its own call); see :mod:`plugtrain_models.decode_fusion` for the stacked
        weights' memory and when they are rebuilt.
        """
        self._fused = True
        if not self.fuse:
            return
        attention = self._layer.self_attn
        self.qkv = fused_linear_step([
            attention.proj_q_dense_layer, attention.proj_k_dense_layer,
            attention.proj_v_dense_layer,
        ])  # fmt: skip
        self.ffn = ffn_step(self._layer.ffn, fuse=True)

    def _query(self, hidden: torch.Tensor, rotary: torch.Tensor | None) -> torch.Tensor:
        """The rotated query ``[B, h, 1, d]`` of ``hidden`` ``[B, H]``."""
        batch, heads, dim = hidden.shape[0], self.heads, self.head_dim
        q = self.q(hidden).view(batch, heads, dim)
        if rotary is not None:
            if q.dtype == torch.float32:
                _rotate_(q, rotary)
            else:  # rotated in float32, rounded once, as apply_rotary does
                q = _rotated(q, rotary)
        return q.view(batch, heads, 1, dim)

    def _fused_query(
        self, normed: torch.Tensor, cache: LayerCache, rotary: torch.Tensor | None
    ) -> torch.Tensor:
        """One ``mm`` for the query, key and value; the key and value written to the cache.

        The query and key heads sit side by side in the product, so one rotation covers both
        (in place in float32; other dtypes rotate in float32 and round once, as
        :func:`apply_rotary` does). Returns the rotated query ``[B, h, 1, d]``.
        """
        assert self.qkv is not None
        batch, heads, groups, dim = normed.shape[0], self.heads, self.groups, self.head_dim
        both = self.qkv(normed)
        rotated = both[:, : (heads + groups) * dim].view(batch, heads + groups, dim)
        if rotary is not None:
            if rotated.dtype == torch.float32:
                _rotate_(rotated, rotary)
            else:
                rotated.copy_(_rotated(rotated, rotary))
        start = cache.start
        cache.keys[:, :, start].copy_(rotated[:, heads:])
        cache.values[:, :, start].copy_(both[:, (heads + groups) * dim :].view(batch, groups, dim))
        return rotated[:, :heads].unsqueeze(2)

    def _attend(
        self, q: torch.Tensor, cache: LayerCache, end: int, bias: torch.Tensor | None,
        first_key: int,
    ) -> torch.Tensor:  # fmt: skip
        """Attention of ``q`` ``[B, h, 1, d]`` to cached slots ``first_key .. end - 1``."""
        batch, heads, groups, dim = q.shape[0], self.heads, self.groups, self.head_dim
        keys = cache.keys[:, :, first_key:end]
        values = cache.values[:, :, first_key:end]
        if self.cap is None:
            attended = functional.scaled_dot_product_attention(
                q, keys, values, attn_mask=None if bias is None else bias.to(q.dtype),
                scale=self.scale, enable_gqa=groups != heads,
            )  # fmt: skip
        else:
            if bias is None:
                bias = torch.zeros(1, 1, 1, keys.shape[2], device=q.device)
            attended = self.capped(q, keys, values, bias)
        return self.o(attended.view(batch, heads * dim))

    def _rest(
        self, hidden: torch.Tensor, normed: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """The residuals and the FFN after attention (``[B, H]`` each)."""
        if self.parallel:
            ffn_in = normed if self.norm3 is None else self.norm3(hidden)
            return (hidden + attended).add_(self.ffn(ffn_in))
        if self.sandwich:
            attended = self.norm1_post(attended)
        hidden = attended.add_(hidden)
        assert self.norm3 is not None
        ffn_out = self.ffn(self.norm3(hidden))
        if self.sandwich:
            ffn_out = self.norm3_post(ffn_out)
        return ffn_out.add_(hidden)

    def step(
        self, hidden: torch.Tensor, cache: LayerCache, bias: torch.Tensor | None,
        rotary: torch.Tensor | None, first_key: int = 0,
    ) -> torch.Tensor:  # fmt: skip
        """The layer's output for ``hidden`` ``[B, H]``, one new token per row.

        :param cache: the layer's cache, ``start`` at the new token's slot (written here).
        :param bias: the additive mask ``[B, 1 or nh, 1, K]`` over cached slots ``first_key
            .. start``, or ``None`` when the token sees all of them.
        :param rotary: the token's RoPE phases ``[B or 1, 1, r/2]`` (complex), or ``None``.
        """
        if not self._fused:
            self._fuse()
        batch, groups, dim = hidden.shape[0], self.groups, self.head_dim
        normed = self.norm1(hidden)
        start = cache.start
        key, value = cache.keys[:, :, start], cache.values[:, :, start]
        if self.qkv is not None:
            return self._rest(
                hidden, normed, self._attend(self._fused_query(normed, cache, rotary),
                                             cache, start + 1, bias, first_key),
            )  # fmt: skip
        key.copy_(self.k(normed).view(batch, groups, dim))
        value.copy_(self.v(normed).view(batch, groups, dim))
        if rotary is not None:
            if key.dtype == torch.float32:
                _rotate_(key, rotary)
            else:
                key.copy_(_rotated(key, rotary))
        q = self._query(normed, rotary)
        return self._rest(hidden, normed, self._attend(q, cache, start + 1, bias, first_key))

    def last_of_prompt(
        self, hidden: torch.Tensor, cache: LayerCache, bias: torch.Tensor | None,
        rotary: torch.Tensor | None,
    ) -> torch.Tensor:  # fmt: skip
        """The last layer on a prompt chunk ``[B, S, H]``: only the last position's output.

        Every position's keys and values go to the cache (from ``start``); the query, the
        attention's output and the FFN are computed for the last position only, the only one
        the logits need.

        :param bias: the last query's additive mask ``[B, 1 or nh, 1, start + S]``, or ``None``
            when it sees every slot.
        :param rotary: the chunk's RoPE phases ``[S or B, S, r/2]`` (as the forward takes them).
        """
        batch, length, width = hidden.shape
        normed = self.norm1(hidden)
        flat = normed.reshape(batch * length, width)
        k = self.k(flat).view(batch, length, self.groups, self.head_dim)
        v = self.v(flat).view(batch, length, self.groups, self.head_dim)
        last_phases = None
        if rotary is not None:
            k = apply_rotary(k, rotary)
            last_phases = rotary[..., -1:, :].reshape(-1, 1, rotary.shape[-1])
        start = cache.start
        cache.keys[:, :, start : start + length] = k.transpose(1, 2)
        cache.values[:, :, start : start + length] = v.transpose(1, 2)
        normed, hidden = normed[:, -1], hidden[:, -1]
        q = self._query(normed, last_phases)
        return self._rest(hidden, normed, self._attend(q, cache, start + length, bias, 0))


def _rotated(x: torch.Tensor, phases: torch.Tensor) -> torch.Tensor:
    wide = x.float()
    _rotate_(wide, phases)
    return wide.to(x.dtype)


def head_step(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """``model``'s ``ln_f`` and head on ``[B, H]`` (the logits' scale and softcap too)."""
    s = model.settings
    logits = linear_step(model.lm_head)(norm_step(model.ln_f)(hidden))
    if s.logits_scale is not None:
        logits = logits * s.logits_scale
    if s.final_cap is not None:
        logits = s.final_cap * torch.tanh(logits / s.final_cap)
    return logits
