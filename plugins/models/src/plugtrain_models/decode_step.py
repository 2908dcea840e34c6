"""One decoder layer for one new token per row, against a KV cache: the generation step.

:meth:`DecoderLayer.forward` computed as plain functions over the layer's own weights, for a
layer in eval mode while no autograd graph is recorded. A :class:`LayerPlan` looks the layer's
parts up once per cache (a stock ``nn.Linear`` becomes one ``mm``, :class:`RMSNorm` or
``nn.LayerNorm`` a few kernels; any other part, a LoRA layer say, stays its module, so it
computes what it always does). A step then skips what a single query in inference never needs:
module calls, dropout, reshapes and transposes (one token per row: hidden states are ``[B, H]``,
queries ``[B, h, 1, d]``), the causal mask (the one query is the newest key) and, for a sliding
window without sinks or padding, any mask at all (the keys are sliced to the window). RoPE
rotates the new key and the query in place.

Between two weight-streaming products every kernel call costs far more than its arithmetic
(the stream has evicted the caches' code and data), so a step makes as few calls as it can:

- the residual stream is updated in place: a stock output or down projection adds its product
  to it in the BLAS call itself (``addmm_``);
- the fused products (:mod:`~plugtrain_models.decode_fusion`) write outputs allocated once per
  cache, whose views (query, key, value, the rotated pairs, a GLU's halves) are made once too;
- a float32 RMSNorm is ``x / hypot(||x||, sqrt(width * eps))`` times ``sqrt(width) * w``, the
  factor folded into the stacked product that reads it (three kernels);
- a token's key and value go to the cache in one copy (the cache holds them in one block).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.attention import Attention, LayerCache
from plugtrain_models.decode_fusion import StackedProduct, fused_linear_step
from plugtrain_models.ffn import FeedForward, FFNLayer
from plugtrain_models.layers import RMSNorm, apply_rotary

__all__ = [
    "LayerPlan", "add_linear_step", "ffn_add_step", "ffn_step", "glu_product", "head_step",
    "linear_step", "norm_step", "rms_weight", "stock_layer",
]  # fmt: skip

Step = Callable[[torch.Tensor], torch.Tensor]
AddStep = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``(residual, x)``: adds a part's output for ``x`` to ``residual`` in place, returns it."""


def stock_layer(layer: nn.Module) -> bool:
    """Whether a :class:`LayerPlan` may compute ``layer`` (a ``DecoderLayer``) now.

    In eval mode, with stock attention, and with no autograd graph recorded (a step writes
    its input in place).
    """
    if layer.training or torch.is_grad_enabled():
        return False
    return type(layer.self_attn) is Attention


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


def add_linear_step(module: nn.Module) -> AddStep:
    """``residual += module(x)``: for a stock ``nn.Linear``, the product accumulated in place.

    ``residual.addmm_(x, W^T)`` adds each dot product to the residual in the BLAS call (the
    bias after it): no output tensor, no separate addition.
    """
    if type(module) is not nn.Linear:
        step = _module(module)
        return lambda residual, x: residual.add_(step(x))
    weight_t, bias = module.weight.t(), module.bias
    if bias is None:  # nn.Linear(bias=False) holds None
        return lambda residual, x: residual.addmm_(x, weight_t)  # type: ignore[unreachable]
    return lambda residual, x: residual.addmm_(x, weight_t).add_(bias)


def _rms_norm(
    hidden: torch.Tensor, weight: torch.Tensor | None, floor: torch.Tensor
) -> torch.Tensor:
    """RMSNorm in float32 as ``x / hypot(||x||, floor) * weight``: three or four kernels.

    With ``floor = sqrt(width * eps)`` and ``weight = sqrt(width) * w`` this is
    ``w * x * rsqrt(mean(x^2) + eps)``, since ``mean(x^2) + eps = (||x||^2 + floor^2) / width``
    (:class:`RMSNorm` sums the squares itself: the two agree to float32 rounding). ``weight``
    ``None`` leaves it out, for the product that reads the output to hold it
    (:func:`rms_weight`).
    """
    norm = torch.linalg.vector_norm(hidden, dim=-1, keepdim=True)
    normed = torch.div(hidden, torch.hypot(norm, floor))
    return normed if weight is None else normed.mul_(weight)


def rms_weight(module: nn.Module) -> tuple[torch.Tensor, float] | None:
    """A float32 :class:`RMSNorm`'s weight and gain, which a product may fold in, or ``None``.

    The product then reads :func:`norm_step`'s output with ``weighted=False``: it must compute
    its modules for ``x * weight * gain``.
    """
    if type(module) is RMSNorm and module.weight.dtype == torch.float32:
        weight: torch.Tensor = module.weight
        return weight, math.sqrt(weight.shape[0])
    return None


def norm_step(module: nn.Module, weighted: bool = True) -> Step:
    """``module`` as a function: a few kernels for :class:`RMSNorm`, one for ``nn.LayerNorm``.

    ``weighted=False`` leaves a float32 RMSNorm's weight out (:func:`rms_weight`: the next
    product holds it).
    """
    if type(module) is RMSNorm:  # in float32, as RMSNorm computes it
        weight, eps = module.weight.float(), module.eps
        shape: tuple[int, ...] = (weight.shape[0],)
        if module.weight.dtype == torch.float32:
            floor = weight.new_full((1,), math.sqrt(shape[0] * eps))
            gained = weight * math.sqrt(shape[0]) if weighted else None
            return lambda hidden: _rms_norm(hidden, gained, floor)
        return lambda hidden: torch.rms_norm(hidden.float(), shape, weight, eps).to(hidden.dtype)
    if type(module) is nn.LayerNorm:
        shape, weight, bias, eps = module.normalized_shape, module.weight, module.bias, module.eps
        return lambda hidden: functional.layer_norm(hidden, shape, weight, bias, eps)
    return _module(module)


class _FusedGLU:
    """``act(gate) * up`` from a GLU's fused product (gate first), into an output made once.

    The product ``[B, 2 * width]`` is written to a tensor kept for the batch size last seen;
    its two halves are views made with it.
    """

    def __init__(self, product: StackedProduct, act: Step, width: int) -> None:
        self.product, self.width = product, width
        self.act = _silu_ if act is functional.silu else act
        self.rows = -1
        self.out = self.gate = self.up = torch.empty(0)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """The GLU's output ``[B, width]`` for ``hidden`` ``[B, in]``."""
        if hidden.shape[0] != self.rows:
            self.rows = hidden.shape[0]
            weight_t = self.product.weight_t
            self.out = weight_t.new_empty(self.rows, weight_t.shape[1])
            self.gate, self.up = self.out[:, : self.width], self.out[:, self.width :]
        self.product(hidden, self.out)
        return self.act(self.gate).mul_(self.up)


def _silu_(x: torch.Tensor) -> torch.Tensor:
    return functional.silu(x, inplace=True)


def _ffn_layer_step(module: nn.Module, fused: StackedProduct | None = None) -> Step:
    """One FFN layer; a GLU's ``fused`` product (gate and up, :func:`glu_product`) as one."""
    if type(module) is not FFNLayer:
        return _module(module)
    main, act = linear_step(module.linear_layer), module.act
    if module.glu:
        assert act is not None
        if fused is not None:
            return _FusedGLU(fused, act, module.linear_layer.out_features)
        gate = linear_step(module.linear_layer_for_glu)
        return lambda hidden: act(gate(hidden)).mul_(main(hidden))
    if act is None:
        return main
    return lambda hidden: act(main(hidden))


def glu_product(
    module: nn.Module, scale: torch.Tensor | None = None, gain: float = 1.0
) -> StackedProduct | None:
    """A ``FeedForward``'s GLU gate and up projections as one product, or ``None``.

    :func:`fused_linear_step` of the two, ``scale`` and ``gain`` folded in.
    """
    if type(module) is not FeedForward or len(module.ffn) != 2:
        return None
    first = module.ffn[0]
    if type(first) is not FFNLayer or not first.glu:
        return None
    return fused_linear_step([first.linear_layer_for_glu, first.linear_layer], scale, gain)


def ffn_step(module: nn.Module, fused: StackedProduct | None = None) -> Step:
    """A layer's FFN without dropout: its two layers, or a mixture of experts' output.

    ``fused``: its GLU's gate and up projections as one product (:func:`glu_product`).
    """
    if type(module) is FeedForward and len(module.ffn) == 2:
        first = _ffn_layer_step(module.ffn[0], fused)
        second = _ffn_layer_step(module.ffn[1])
        return lambda hidden: second(first(hidden))

    def routed(hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = module(hidden)[0]
        return out

    return routed


def ffn_add_step(module: nn.Module, fused: StackedProduct | None = None) -> AddStep:
    """``residual += ffn(x)`` (:func:`ffn_step`), a stock last projection accumulated in place."""
    if type(module) is FeedForward and len(module.ffn) == 2:
        last = module.ffn[1]
        if type(last) is FFNLayer and not last.glu and last.act is None:
            first = _ffn_layer_step(module.ffn[0], fused)
            down = add_linear_step(last.linear_layer)
            return lambda residual, x: down(residual, first(x))
    step = ffn_step(module, fused)
    return lambda residual, x: residual.add_(step(x))


Product = Callable[[torch.Tensor | None, float], StackedProduct | None]


def _folded(product: Product, norm: nn.Module | None) -> tuple[StackedProduct | None, bool]:
    """A product with ``norm``'s weight folded in (``True``), or without it (``False``).

    ``product(weight, gain)`` where ``norm`` is a float32 RMSNorm (:func:`rms_weight`) and
    that product exists, else ``product(None, 1.0)``.
    """
    folding = None if norm is None else rms_weight(norm)
    if folding is not None:
        folded = product(*folding)
        if folded is not None:
            return folded, True
    return product(None, 1.0), False


def _rotate_(x: torch.Tensor, phases: torch.Tensor) -> None:
    """RoPE on ``x`` ``[..., d]`` (float32) in place; ``phases`` broadcast over its pairs."""
    _pairs(x, phases.shape[-1]).mul_(phases)


def _pairs(x: torch.Tensor, half: int) -> torch.Tensor:
    """The first ``2 * half`` dims of ``x`` ``[..., d]`` (float32) as ``half`` complex numbers."""
    return torch.view_as_complex(x[..., : 2 * half].unflatten(-1, (half, 2)))


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
        self.o_add = add_linear_step(attention.proj_output_dense_layer)
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
        self.ffn_add = ffn_add_step(layer.ffn)
        self.qkv: StackedProduct | None = None
        """The query, key and value projections' stacked product, once fused."""
        self.glu: StackedProduct | None = None
        """A GLU's gate and up projections' stacked product, once fused."""
        self._layer: Any = layer
        self._rows = -1
        self._prepared = False

    def _fuse(self) -> None:
        """Fuse the projections that share an input, for :meth:`step` (once, on its first call).

        With :attr:`fuse`, the query, key and value projections become one ``mm``, and so do a
        GLU's gate and up projections, where they are stock ``nn.Linear`` layers (a LoRA layer
        keeps its own call); see :mod:`plugtrain_models.decode_fusion` for the stacked
        weights' memory and when they are rebuilt. A float32 RMSNorm whose output only such a
        product reads has its weight folded into the stacked weight.
        """
        self._prepared = True
        if not self.fuse:
            return
        layer = self._layer
        attention = layer.self_attn
        projections = [
            attention.proj_q_dense_layer, attention.proj_k_dense_layer,
            attention.proj_v_dense_layer,
        ]  # fmt: skip
        shared = self.parallel and self.norm3 is None  # norm1's output also feeds the FFN
        self.qkv, folded = _folded(
            lambda scale, gain: fused_linear_step(projections, scale, gain),
            None if shared else layer.norm1,
        )
        if folded:
            self.norm1 = norm_step(layer.norm1, weighted=False)
        norm3 = layer.norm3 if self.norm3 is not None else None
        self.glu, folded = _folded(lambda scale, gain: glu_product(layer.ffn, scale, gain), norm3)
        if folded:
            self.norm3 = norm_step(layer.norm3, weighted=False)
        self.ffn = ffn_step(layer.ffn, self.glu)
        self.ffn_add = ffn_add_step(layer.ffn, self.glu)

    def _outputs(self, rows: int) -> None:
        """The fused query/key/value product's output for ``rows`` rows, and its views."""
        assert self.qkv is not None
        heads, groups, dim = self.heads, self.groups, self.head_dim
        weight_t = self.qkv.weight_t
        self._rows = rows
        self._qkv = weight_t.new_empty(rows, weight_t.shape[1])
        self._rotated = self._qkv[:, : (heads + groups) * dim].view(rows, heads + groups, dim)
        self._q = self._qkv[:, : heads * dim].view(rows, heads, 1, dim)
        self._k = self._rotated[:, heads:]
        self._v = self._qkv[:, (heads + groups) * dim :].view(rows, groups, dim)
        self._new_kv = self._qkv[:, heads * dim :].view(rows, 2, groups, dim).transpose(0, 1)
        self._pairs: torch.Tensor | None = None
        self._kv_of: LayerCache | None = None
        self._kv: torch.Tensor | None = None

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
        if normed.shape[0] != self._rows:
            self._outputs(normed.shape[0])
        self.qkv(normed, self._qkv)
        if rotary is not None:
            pairs = self._pairs
            if pairs is None and self._qkv.dtype == torch.float32:
                pairs = self._pairs = _pairs(self._rotated, rotary.shape[-1])
            if pairs is not None:
                pairs.mul_(rotary)
            else:
                self._rotated.copy_(_rotated(self._rotated, rotary))
        if cache is not self._kv_of:
            self._kv_of, self._kv = cache, _keys_and_values(cache)
        if self._kv is not None:
            self._kv.select(3, cache.start).copy_(self._new_kv)
        else:
            cache.keys.select(2, cache.start).copy_(self._k)
            cache.values.select(2, cache.start).copy_(self._v)
        return self._q

    def _attend(
        self, q: torch.Tensor, cache: LayerCache, end: int, bias: torch.Tensor | None,
        first_key: int,
    ) -> torch.Tensor:  # fmt: skip
        """Attention of ``q`` ``[B, h, 1, d]`` to cached slots ``first_key .. end - 1``.

        Returns the heads' outputs side by side, ``[B, h * d]`` (before the output projection).
        """
        batch, heads, groups, dim = q.shape[0], self.heads, self.groups, self.head_dim
        keys = cache.keys.narrow(2, first_key, end - first_key)
        values = cache.values.narrow(2, first_key, end - first_key)
        if self.cap is None:
            attended = functional.scaled_dot_product_attention(
                q, keys, values, attn_mask=None if bias is None else bias.to(q.dtype),
                scale=self.scale, enable_gqa=groups != heads,
            )  # fmt: skip
        else:
            if bias is None:
                bias = torch.zeros(1, 1, 1, keys.shape[2], device=q.device)
            attended = self.capped(q, keys, values, bias)
        return attended.view(batch, heads * dim)

    def _residuals(
        self, hidden: torch.Tensor, normed: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """The output projection, the FFN and both residuals, added to ``hidden`` in place."""
        if self.parallel:
            ffn_in = normed if self.norm3 is None else self.norm3(hidden)
            self.o_add(hidden, attended)
            return self.ffn_add(hidden, ffn_in)
        assert self.norm3 is not None
        if self.sandwich:
            hidden.add_(self.norm1_post(self.o(attended)))
            return hidden.add_(self.norm3_post(self.ffn(self.norm3(hidden))))
        self.o_add(hidden, attended)
        return self.ffn_add(hidden, self.norm3(hidden))

    def step(
        self, hidden: torch.Tensor, cache: LayerCache, bias: torch.Tensor | None,
        rotary: torch.Tensor | None, first_key: int = 0,
    ) -> torch.Tensor:  # fmt: skip
        """The layer's output for ``hidden`` ``[B, H]``, one new token per row.

        The output is ``hidden`` itself, updated in place (the residual stream).

        :param cache: the layer's cache, ``start`` at the new token's slot (written here).
        :param bias: the additive mask ``[B, 1 or nh, 1, K]`` over cached slots ``first_key
            .. start``, or ``None`` when the token sees all of them.
        :param rotary: the token's RoPE phases ``[B or 1, 1, r/2]`` (complex), or ``None``.
        """
        if not self._prepared:
            self._fuse()
        normed = self.norm1(hidden)
        if self.qkv is not None:
            q = self._fused_query(normed, cache, rotary)
        else:
            q = self._separate_query(normed, cache, rotary)
        attended = self._attend(q, cache, cache.start + 1, bias, first_key)
        return self._residuals(hidden, normed, attended)

    def _separate_query(
        self, normed: torch.Tensor, cache: LayerCache, rotary: torch.Tensor | None
    ) -> torch.Tensor:
        """The query, key and value as three products; the key and value written to the cache."""
        batch, groups, dim = normed.shape[0], self.groups, self.head_dim
        key, value = cache.keys.select(2, cache.start), cache.values.select(2, cache.start)
        key.copy_(self.k(normed).view(batch, groups, dim))
        value.copy_(self.v(normed).view(batch, groups, dim))
        if rotary is not None:
            if key.dtype == torch.float32:
                _rotate_(key, rotary)
            else:
                key.copy_(_rotated(key, rotary))
        return self._query(normed, rotary)

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
        normed, hidden = normed[:, -1], hidden[:, -1].contiguous()
        q = self._query(normed, last_phases)
        attended = self._attend(q, cache, start + length, bias, 0)
        return self._residuals(hidden, normed, attended)


def _keys_and_values(cache: LayerCache) -> torch.Tensor | None:
    """``cache``'s keys and values as one ``[2, B, groups, capacity, d]`` view, or ``None``.

    A view where the values follow the keys in one block, as
    :class:`~plugtrain_models.attention.KVCache` allocates them.
    """
    keys, values = cache.keys, cache.values
    if not (keys.is_contiguous() and values.is_contiguous()) or keys.dtype != values.dtype:
        return None
    same = keys.untyped_storage().data_ptr() == values.untyped_storage().data_ptr()
    if not same or values.storage_offset() != keys.storage_offset() + keys.numel():
        return None
    return keys.as_strided((2, *keys.shape), (keys.numel(), *keys.stride()))


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
