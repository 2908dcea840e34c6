"""The built-in decoder-only transformer ``GPT`` (GPT-2's architecture, Model Zoo's names).

Submodules are named as in Cerebras Model Zoo's GPT-2/GPT-3 so that its run files' parameter
globs apply: ``layers.N.self_attn.proj_{q,k,v}_dense_layer``, ``...proj_output_dense_layer``,
``layers.N.ffn.{0,1}.linear_layer``, ``token_embedding`` / ``position_embedding``, ``norm1`` /
``norm2`` / ``final_norm``, and the head ``lm_head``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn import functional

__all__ = ["GPT"]

IGNORE_INDEX = -100
"""Labels equal to this are not scored (``cross_entropy``'s default ``ignore_index``)."""


class SelfAttention(nn.Module):
    """Multi-head causal self-attention with separate q, k and v projections."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.proj_q_dense_layer = nn.Linear(n_embd, n_embd, bias=bias)
        self.proj_k_dense_layer = nn.Linear(n_embd, n_embd, bias=bias)
        self.proj_v_dense_layer = nn.Linear(n_embd, n_embd, bias=bias)
        self.proj_output_dense_layer = nn.Linear(n_embd, n_embd, bias=bias)
        self.output_dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, length, width = hidden.shape
        shape = (batch, length, self.n_head, width // self.n_head)
        q = self.proj_q_dense_layer(hidden).view(shape).transpose(1, 2)
        k = self.proj_k_dense_layer(hidden).view(shape).transpose(1, 2)
        v = self.proj_v_dense_layer(hidden).view(shape).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        attended = functional.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True
        )
        merged = attended.transpose(1, 2).reshape(batch, length, width)
        out: torch.Tensor = self.output_dropout(self.proj_output_dense_layer(merged))
        return out


class DenseLayer(nn.Module):
    """One feed-forward layer: ``linear_layer`` and an optional GELU (Model Zoo's name)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, gelu: bool) -> None:
        super().__init__()
        self.linear_layer = nn.Linear(in_features, out_features, bias=bias)
        self.gelu = gelu

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear_layer(hidden)
        return functional.gelu(out) if self.gelu else out


class Block(nn.Module):
    """A pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + ffn(norm2(x))``."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(n_embd, bias=bias)
        self.self_attn = SelfAttention(n_embd, n_head, dropout, bias)
        self.norm2 = nn.LayerNorm(n_embd, bias=bias)
        self.ffn = nn.Sequential(
            DenseLayer(n_embd, 4 * n_embd, bias, gelu=True),
            DenseLayer(4 * n_embd, n_embd, bias, gelu=False),
            nn.Dropout(dropout),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.norm1(hidden))
        out: torch.Tensor = hidden + self.ffn(self.norm2(hidden))
        return out


class GPT(nn.Module):
    """A decoder-only transformer language model that computes its own loss.

    ``forward(batch)`` takes a mapping with ``input_ids`` (``[batch, length]`` int64, length at
    most ``block_size``) and optionally ``labels`` (the same shape; ``-100`` is not scored), or
    the ``input_ids`` tensor alone. With labels it returns ``{"loss", "accuracy",
    "num_examples"}``: the mean cross-entropy per scored token (nats), the share of tokens
    predicted exactly, and the number of scored tokens, which the Trainer weights averages
    with. Without labels it returns the logits ``[batch, length, vocab_size]``.

    GPT-2's initialisation: weights normal with standard deviation 0.02 (the residual output
    projections 0.02 / sqrt(2 * n_layer)), biases zero, norms one.
    """

    report_perplexity: ClassVar[bool] = True
    """Its loss is a mean negative log-likelihood: evaluation reports ``exp(loss)`` too."""

    def __init__(
        self,
        *,
        vocab_size: int = 256,
        n_layer: int = 4,
        n_head: int = 4,
        n_embd: int = 128,
        block_size: int = 128,
        dropout: float = 0.0,
        bias: bool = True,
        tie_weights: bool = True,
    ) -> None:
        super().__init__()
        if n_embd % n_head:
            message = f"n_embd ({n_embd}) must be a multiple of n_head ({n_head})"
            raise ValueError(message)
        self.block_size = block_size
        self.token_embedding = nn.Embedding(vocab_size, n_embd)
        self.position_embedding = nn.Embedding(block_size, n_embd)
        self.embedding_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(Block(n_embd, n_head, dropout, bias) for _ in range(n_layer))
        self.final_norm = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        self._initialise(n_layer)

    def _initialise(self, n_layer: int) -> None:
        residual_std = 0.02 / math.sqrt(2 * n_layer)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                residual = name.endswith(("proj_output_dense_layer", "ffn.1.linear_layer"))
                nn.init.normal_(module.weight, mean=0.0, std=residual_std if residual else 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[batch, length, vocab_size]`` for ``input_ids``."""
        length = input_ids.shape[1]
        if length > self.block_size:
            message = f"a sequence of {length} tokens is longer than block_size {self.block_size}"
            raise ValueError(message)
        positions = torch.arange(length, device=input_ids.device)
        hidden = self.token_embedding(input_ids) + self.position_embedding(positions)
        hidden = self.embedding_dropout(hidden)
        for layer in self.layers:
            hidden = layer(hidden)
        out: torch.Tensor = self.lm_head(self.final_norm(hidden))
        return out

    def forward(self, batch: Mapping[str, torch.Tensor] | torch.Tensor) -> Any:
        """The loss mapping for a batch with labels, else the logits (see the class)."""
        if not isinstance(batch, Mapping):
            return self.logits(batch)
        logits = self.logits(batch["input_ids"])
        labels = batch.get("labels")
        if labels is None:
            return logits
        flat_labels = labels.reshape(-1)
        flat_logits = logits.reshape(-1, logits.shape[-1]).float()
        loss = functional.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE_INDEX)
        with torch.no_grad():
            scored = flat_labels != IGNORE_INDEX
            count = int(scored.sum())
            hits = (flat_logits.argmax(dim=-1) == flat_labels) & scored
            accuracy = hits.sum().float() / max(count, 1)
        return {"loss": loss, "accuracy": accuracy, "num_examples": count}
