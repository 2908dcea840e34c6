"""Model Zoo's decoder language model: one module, the GPT-2 path and the parallel GPT-J path.

The module tree and registration order are Model Zoo's, so its run files'
globs and checkpoints' names apply: ``model.embedding_layer.word_embeddings``,
``model.transformer_decoder.layers.N.self_attn.proj_q_dense_layer``, ``model.ln_f`` (also
reachable as ``model.transformer_decoder.norm``), ``model.lm_head``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from plugtrain_models.attention import Attention, KVCache, LayerCache
from plugtrain_models.decode_step import LayerPlan, head_step, stock_layer
from plugtrain_models.ffn import RouterStats, make_ffn
from plugtrain_models.layers import (
    alibi_slopes,
    allowed_keys,
    cached_allowed_keys,
    make_norm,
    rotary_phases,
    sinusoidal_table,
    soft_cap,
)
from plugtrain_models.settings import DecoderSettings

__all__ = ["DecoderLayer", "EmbeddingLayer", "LanguageModel", "TransformerDecoder"]


class LearnedPositions(nn.Module):
    """A learned position table (``position_embeddings.embed``)."""

    def __init__(self, positions: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(positions, width)


class AlibiSlopes(nn.Module):
    """ALiBi's per-head slopes ``[nh, 1]``; trained only with ``alibi_trainable_slopes``."""

    def __init__(self, heads: int, trainable: bool) -> None:
        super().__init__()
        self.heads = heads
        slopes = torch.tensor(alibi_slopes(heads)).unsqueeze(1)
        self.slopes = nn.Parameter(slopes, requires_grad=trainable)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """ALiBi's fixed slopes again (the values construction gives them)."""
        self.slopes.copy_(torch.tensor(alibi_slopes(self.heads)).unsqueeze(1))


class EmbeddingLayer(nn.Module):
    """Token embeddings plus learned or fixed positions; holds the ALiBi slopes."""

    def __init__(self, s: DecoderSettings) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(s.vocab_size, s.hidden_size)
        if s.positions == "learned":
            self.position_embeddings = LearnedPositions(s.max_positions, s.hidden_size)
        if s.positions == "alibi":
            self.position_embed_helper = AlibiSlopes(s.num_heads, s.alibi_trainable)
        if s.positions == "fixed":
            table = sinusoidal_table(s.max_positions, s.hidden_size)
            self.register_buffer("fixed_positions", table, persistent=False)
        self.positions = s.positions

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """The fixed position table again (the only value this module holds itself)."""
        if self.positions == "fixed":
            table = self.get_buffer("fixed_positions")
            table.copy_(sinusoidal_table(table.shape[0], table.shape[1]))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``W_tok[ids]`` plus the position table at ``positions`` where there is one."""
        out: torch.Tensor = self.word_embeddings(input_ids)
        if self.positions == "learned":
            out = out + self.position_embeddings.embed(positions)
        elif self.positions == "fixed":
            table = self.get_buffer("fixed_positions")
            out = out + table[positions].to(out.dtype)
        return out


class DecoderLayer(nn.Module):
    """One block: sequential pre-norm (GPT-2 path) or parallel attention and FFN (GPT-J)."""

    def __init__(self, s: DecoderSettings, index: int) -> None:
        super().__init__()
        self.self_attn = Attention(s, index)
        self.norm1 = make_norm(s.norm_type, s.hidden_size, s.eps)
        if not s.parallel or s.untied_norm:
            self.norm3 = make_norm(s.norm_type, s.hidden_size, s.eps)
        if s.sandwich:
            self.norm1_post = make_norm(s.norm_type, s.hidden_size, s.eps)
            self.norm3_post = make_norm(s.norm_type, s.hidden_size, s.eps)
        self.ffn = make_ffn(s)
        self.parallel = s.parallel
        self.sandwich = s.sandwich

    def forward(
        self,
        hidden: torch.Tensor,
        bias: torch.Tensor | None,
        rotary: torch.Tensor | None,
        cache: LayerCache | None = None,
    ) -> tuple[torch.Tensor, RouterStats | None]:
        """The layer's output and its router statistics (MoE only)."""
        dropout = self.self_attn.output_dropout
        normed = self.norm1(hidden)
        attended = self.self_attn(normed, bias, rotary, cache)
        if self.parallel:
            ffn_in = self.norm3(hidden) if hasattr(self, "norm3") else normed
            ffn_out, stats = self.ffn(ffn_in)
            return hidden + dropout(attended) + ffn_out, stats
        if self.sandwich:
            attended = self.norm1_post(attended)
        hidden = hidden + dropout(attended)
        ffn_out, stats = self.ffn(self.norm3(hidden))
        if self.sandwich:
            ffn_out = self.norm3_post(ffn_out)
        return hidden + ffn_out, stats


class TransformerDecoder(nn.Module):
    """The layers; ``norm`` is the language model's ``ln_f`` (one module, two paths)."""

    def __init__(self, s: DecoderSettings, norm: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(s, index) for index in range(s.num_layers))
        self.norm = norm


class LanguageModel(nn.Module):
    """Model Zoo's ``GPT2LMHeadModel`` / ``GPTJModel``: embeddings, layers, ``ln_f``, head."""

    def __init__(self, s: DecoderSettings) -> None:
        super().__init__()
        self.settings = s
        self.embedding_layer = EmbeddingLayer(s)
        if s.embedding_norm:
            self.embedding_ln_f = make_norm(s.norm_type, s.hidden_size, s.eps)
        self.ln_f = make_norm(s.norm_type, s.hidden_size, s.eps)
        self.transformer_decoder = TransformerDecoder(s, self.ln_f)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=s.lm_head_bias)
        if s.tied:
            self.lm_head.weight = self.embedding_layer.word_embeddings.weight
        self.embedding_dropout = nn.Dropout(s.embedding_dropout)
        self.register_load_state_dict_pre_hook(_either_final_norm)  # type: ignore[no-untyped-call]

    def _bias(
        self, length: int, device: torch.device, window: int | None,
        attention_span: torch.Tensor | None,
    ) -> torch.Tensor | None:  # fmt: skip
        """The additive ``[1 or B, 1 or nh, S, S]`` mask: ALiBi, then -inf where not allowed.

        ``None`` when it is plain causal: attention then takes the faster causal path.
        """
        s = self.settings
        plain = s.positions != "alibi" and attention_span is None
        if plain and (window is None or window >= length):
            return None
        allowed = allowed_keys(length, window, s.sinks, device).unsqueeze(0)
        if attention_span is not None:  # VSL: q sees k iff k <= q <= k + span[k]
            query = torch.arange(length, device=device).view(1, -1, 1)
            key = torch.arange(length, device=device).view(1, 1, -1)
            allowed = allowed & (query <= key + attention_span.unsqueeze(1))
        bias = torch.zeros(allowed.shape, device=device).masked_fill(~allowed, float("-inf"))
        bias = bias.unsqueeze(1)
        if s.positions == "alibi":
            distance = torch.arange(length, device=device)
            distance = (distance.view(-1, 1) - distance.view(1, -1)).abs().float()
            slopes = self.embedding_layer.position_embed_helper.slopes / s.pos_scaling_factor
            bias = bias - slopes.view(1, -1, 1, 1) * distance
        return bias

    def _cached_bias(self, cache: KVCache, count: int, window: int | None) -> torch.Tensor:
        """The additive ``[B, 1 or nh, S, K]`` mask of the last ``count`` cached slots' queries."""
        s = self.settings
        positions = cache.slot_positions()
        allowed = cached_allowed_keys(positions, cache.slot_valid(), count, window, s.sinks)
        bias = torch.zeros(allowed.shape, device=positions.device)
        bias = bias.masked_fill(~allowed, float("-inf")).unsqueeze(1)
        if s.positions == "alibi":
            distance = (positions[:, -count:].unsqueeze(2) - positions.unsqueeze(1)).abs()
            slopes = self.embedding_layer.position_embed_helper.slopes / s.pos_scaling_factor
            bias = bias - slopes.view(1, -1, 1, 1) * distance.unsqueeze(1).float()
        return bias

    def _layer_windows(self) -> list[int | None]:
        s = self.settings
        if s.window is None or s.window_layers == "all":
            return [s.window] * s.num_layers
        windowed_parity = 1 if s.window_layers == "full_attention_first" else 0
        return [s.window if i % 2 == windowed_parity else None for i in range(s.num_layers)]

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_span: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[RouterStats]]:
        """Logits ``[B, S, V]`` and the MoE layers' router statistics."""
        hidden, stats = self.trunk(input_ids, position_ids, attention_span)
        return self._head(hidden), stats

    def trunk(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        attention_span: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[RouterStats]]:
        """The last layer's output ``[B, S, H]`` (before ``ln_f``) and the router statistics."""
        s = self.settings
        length = input_ids.shape[1]
        if length > s.max_positions:
            message = f"a sequence of {length} tokens is longer than max_position_embeddings"
            raise ValueError(f"{message} ({s.max_positions})")
        device = input_ids.device
        if attention_span is not None and s.window is not None:
            message = "a sliding window cannot be combined with VSL (attention_span)"
            raise ValueError(message)
        positions = (
            position_ids if position_ids is not None else torch.arange(length, device=device)
        )
        hidden = self.embedding_layer(input_ids, positions)
        if s.embedding_norm:
            hidden = self.embedding_ln_f(hidden)
        hidden = self.embedding_dropout(_scaled(hidden, s.embeddings_scale))
        rotary = None
        if s.positions == "rotary":
            rotary = rotary_phases(
                positions, s.rotary_dim, s.rope_theta, s.pos_scaling_type,
                s.pos_scaling_factor, s.pos_scaling_extra,
            )  # fmt: skip
        biases: dict[int | None, torch.Tensor | None] = {}
        stats: list[RouterStats] = []
        for layer, window in zip(
            self.transformer_decoder.layers, self._layer_windows(), strict=True
        ):
            if window not in biases:
                biases[window] = self._bias(length, device, window, attention_span)
            hidden, layer_stats = layer(hidden, biases[window], rotary)
            if layer_stats is not None:
                stats.append(layer_stats)
        return hidden, stats

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """``ln_f``, the head, then the logits' scale and softcap."""
        return self.logits_of(self.ln_f(hidden))

    def logits_of(self, normed: torch.Tensor) -> torch.Tensor:
        """The head on ``ln_f``'s output, then the logits' scale and softcap."""
        s = self.settings
        logits: torch.Tensor = self.lm_head(normed)
        if s.logits_scale is not None:
            logits = logits * s.logits_scale
        if s.final_cap is not None:
            logits = soft_cap(logits, s.final_cap)  # the head's own output: soft_cap may reuse it
        return logits

    def _step_bias(self, cache: KVCache, window: int | None) -> tuple[torch.Tensor | None, int]:
        """The mask of one new token per row: ``(bias over slots first .. length - 1, first)``.

        ``None`` when the token sees every slot from ``first`` on: no padding, no ALiBi, and a
        window without sinks becomes the slots it covers.
        """
        s = self.settings
        end = cache.length
        if s.positions == "alibi" or (cache.padded and window is not None):
            return self._cached_bias(cache, 1, window), 0
        if cache.padded:
            return cache.padding_bias[:, :, :, :end], 0
        if window is None or window >= end:
            return None, 0
        if not s.sinks:
            return None, end - window
        bias = torch.zeros(1, 1, 1, end, device=cache.device)
        bias[..., s.sinks : end - window] = float("-inf")
        return bias, 0

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty :class:`KVCache` for ``batch`` rows of up to ``capacity`` tokens each.

        With RoPE it holds the phases of positions ``0 .. capacity - 1``, computed once.
        """
        weight = self.embedding_layer.word_embeddings.weight
        cache = KVCache(self.settings, batch, capacity, weight.dtype, weight.device)
        s = self.settings
        if s.positions == "rotary":
            cache.rotary = rotary_phases(
                torch.arange(capacity, device=weight.device), s.rotary_dim, s.rope_theta,
                s.pos_scaling_type, s.pos_scaling_factor, s.pos_scaling_extra,
            )  # fmt: skip
        return cache

    def decode(
        self, input_ids: torch.Tensor, cache: KVCache, mask: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:  # fmt: skip
        """Logits of new tokens ``[B, S]`` after those in ``cache``, which takes their keys.

        A prompt on an empty cache without padding attends causally without a mask; with
        ``last_only`` its last layer computes the last position only (every position's keys
        still go to the cache). One new token per row runs
        :meth:`~plugtrain_models.decode_step.LayerPlan.step` (no mask unless padding, ALiBi or
        a window's sinks need one).

        :param mask: ``[B, S]``, 0 where a row is padded (left padding of a batch of prompts);
            each row's positions count its real tokens only.
        :param last_only: return the last position's logits only (``[B, 1, V]``).
        """
        s = self.settings
        count = input_ids.shape[1]
        if mask is None:
            furthest = cache.longest + count
        else:
            before = cache.next_position if cache.padded else cache.length
            furthest = int((before + mask.sum(1)).max())
        if furthest > s.max_positions:
            message = f"generation goes past max_position_embeddings ({s.max_positions})"
            raise ValueError(message)
        start = cache.length
        positions = cache.append(count, mask)
        hidden = self.embedding_layer(input_ids, positions)
        if s.embedding_norm:
            hidden = self.embedding_ln_f(hidden)
        hidden = _scaled(hidden, s.embeddings_scale)
        rotary = None
        if s.positions == "rotary":
            if cache.rotary is None:
                cache.rotary = rotary_phases(
                    torch.arange(cache.capacity, device=hidden.device), s.rotary_dim,
                    s.rope_theta, s.pos_scaling_type, s.pos_scaling_factor, s.pos_scaling_extra,
                )  # fmt: skip
            rotary = cache.rotary[positions if cache.padded else slice(start, start + count)]
        layers = self.transformer_decoder.layers
        windows = self._layer_windows()
        if count == 1 and mask is None and all(stock_layer(layer) for layer in layers):
            if not cache.plans:
                cache.plans = [LayerPlan(layer) for layer in layers]
            phases = None if rotary is None else rotary.view(-1, 1, rotary.shape[-1])
            steps: dict[int | None, tuple[torch.Tensor | None, int]] = {}
            hidden = hidden.view(hidden.shape[0], -1)
            for plan, window, layer_cache in zip(cache.plans, windows, cache.layers, strict=True):
                if window not in steps:
                    steps[window] = self._step_bias(cache, window)
                bias, first = steps[window]
                hidden = plan.step(hidden, layer_cache, bias, phases, first)
            return head_step(self, hidden).unsqueeze(1)
        causal = start == 0 and not cache.padded and s.positions != "alibi"
        biases: dict[int | None, torch.Tensor | None] = {}
        last = len(layers) - 1 if last_only and stock_layer(layers[-1]) else None
        for index, (layer, window, layer_cache) in enumerate(
            zip(layers, windows, cache.layers, strict=True)
        ):
            if window not in biases:
                plain = causal and (window is None or window >= count)
                biases[window] = None if plain else self._cached_bias(cache, count, window)
            bias = biases[window]
            if index == last:  # the logits need the last position's output only
                row = None if bias is None else bias[:, :, -1:]
                out = LayerPlan(layer).last_of_prompt(hidden, layer_cache, row, rotary)
                return head_step(self, out).unsqueeze(1)
            hidden, _ = layer(hidden, bias, rotary, layer_cache)
        if last_only:
            hidden = hidden[:, -1:]
        return self._head(hidden)


def _scaled(hidden: torch.Tensor, scale: float) -> torch.Tensor:
    """``hidden * scale``; ``hidden`` itself when the scale is 1 (no pass over it)."""
    return hidden if scale == 1.0 else hidden * scale


def _either_final_norm(
    module: nn.Module, state_dict: dict[str, Any], prefix: str, *_args: Any
) -> None:
    """Loading accepts ``ln_f.*`` or ``transformer_decoder.norm.*`` alone (one module)."""
    for suffix in ("weight", "bias"):
        first, second = f"{prefix}ln_f.{suffix}", f"{prefix}transformer_decoder.norm.{suffix}"
        if first in state_dict and second not in state_dict:
            state_dict[second] = state_dict[first]
        elif second in state_dict and first not in state_dict:
            state_dict[first] = state_dict[second]
