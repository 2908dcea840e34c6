"""The LoRA layers: an ``nn.Linear`` or ``nn.Embedding`` plus ``lora_A`` and ``lora_B``.

As Model Zoo's (loralib's): a Linear gets ``lora_A [r, in]`` (Kaiming-uniform, ``a = sqrt(5)``)
and ``lora_B [out, r]`` (zeros) and computes ``W x + b + (B A dropout(x)) * alpha / r``; an
Embedding gets ``lora_A [r, num_embeddings]`` (zeros) and ``lora_B [dim, r]`` (normal) and adds
``(A^T[ids] B^T) * alpha / r``. Each is a subclass of the layer it replaces and keeps its
``weight`` and ``bias`` (the same parameters, so tied weights stay tied and checkpoint keys are
unchanged); the adapters are ``<layer>.lora_A`` and ``<layer>.lora_B``.

The adapters are drawn from a generator seeded by the run's seed and the layer's name, so a
model built whole and one built on the ``meta`` device and filled shard by shard (FSDP2) get
the same adapters, and the base weights' random draws are those of the model without LoRA.

``merge_weights``: ``eval()`` swaps in ``W + B A * scaling`` and ``train()`` swaps the original
tensor back (bit-exact; loralib adds and subtracts). A weight shared by two adapted layers (tied
embeddings), or held in shards, is never merged: the unmerged forward computes the same.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.lora.config import LoraConfig

__all__ = ["LoraEmbedding", "LoraLayer", "LoraLinear", "lora_layers"]


def _generator(seed: int, name: str) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)
    return generator


class LoraLayer:
    """What both LoRA layers share: their settings, initialisation and merging."""

    lora_A: nn.Parameter
    lora_B: nn.Parameter
    weight: Any
    config: LoraConfig
    scaling: float
    lora_name: str
    lora_seed: int
    merge: bool
    _unmerged: torch.Tensor | None
    adapters_off: bool = False
    """Compute the base layer alone (see :mod:`plugtrain_models.lora.disabled`)."""

    def _attach(self, config: LoraConfig, name: str, seed: int, a_shape: Any, b_shape: Any) -> None:
        self.config, self.lora_name, self.lora_seed = config, name, seed
        self.scaling = config.scaling
        self.merge = config.merge_weights
        self._unmerged = None
        like = self.weight
        self.lora_A = nn.Parameter(torch.empty(a_shape, dtype=like.dtype, device=like.device))
        self.lora_B = nn.Parameter(torch.empty(b_shape, dtype=like.dtype, device=like.device))

    def delta(self) -> torch.Tensor:
        """``B A * scaling`` in the weight's layout."""
        raise NotImplementedError

    def _merge_allowed(self) -> bool:
        weight = self.weight.data
        off = self.adapters_off  # switched off: the base weight stays as it is
        return self.merge and not off and type(weight).__name__ != "DTensor" and not weight.is_meta

    def _set_merged(self, merged: bool) -> None:
        if merged and self._unmerged is None and self._merge_allowed():
            with torch.no_grad():
                original, delta = self.weight.data, self.delta()
                # a float32 update of a weight held in bfloat16 merges in float32, as the
                # float32 weight it stands for does
                wide = torch.promote_types(original.dtype, delta.dtype)
                self.weight.data = original.to(wide) + delta.to(wide)
            self._unmerged = original
        elif not merged and self._unmerged is not None:
            self.weight.data = self._unmerged
            self._unmerged = None

    @property
    def merged(self) -> bool:
        """Whether the update is in the weight now (``eval()`` with ``merge_weights``)."""
        return self._unmerged is not None


class LoraLinear(nn.Linear, LoraLayer):
    """An ``nn.Linear`` with a low-rank update (Model Zoo's ``LoRA_Linear``)."""

    def __init__(self, base: nn.Linear, config: LoraConfig, name: str, seed: int) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self._attach(
            config, name, seed, (config.r, self.in_features), (self.out_features, config.r)
        )
        self.lora_dropout = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()
        self.reset_lora_parameters()
        self.train(base.training)

    def reset_parameters(self) -> None:
        """The base layer's own initialisation, then the adapters' (see the module)."""
        super().reset_parameters()
        if hasattr(self, "lora_A"):
            self.reset_lora_parameters()

    @torch.no_grad()
    def reset_lora_parameters(self) -> None:
        """``lora_A`` Kaiming-uniform (``a = sqrt(5)``), ``lora_B`` zeros."""
        generator = _generator(self.lora_seed, self.lora_name)
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5), generator=generator)
        nn.init.zeros_(self.lora_B)

    def delta(self) -> torch.Tensor:
        """``B A * scaling`` (``[out, in]``)."""
        delta: torch.Tensor = (self.lora_B @ self.lora_A) * self.scaling
        return delta

    def train(self, mode: bool = True) -> LoraLinear:
        """As ``nn.Module.train``; with ``merge_weights``, ``eval()`` merges the update."""
        super().train(mode)
        self._set_merged(not mode)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``W x + b``, plus ``B A dropout(x) * scaling`` unless merged or switched off."""
        result: torch.Tensor = functional.linear(x, self.weight, self.bias)
        if self.merged or self.adapters_off:
            return result
        update: torch.Tensor = self.lora_dropout(x) @ self.lora_A.transpose(0, 1)
        return result + (update @ self.lora_B.transpose(0, 1)) * self.scaling

    def extra_repr(self) -> str:
        """The base layer's, with the rank and scaling."""
        return f"{super().extra_repr()}, r={self.config.r}, scaling={self.scaling:g}"


class LoraEmbedding(nn.Embedding, LoraLayer):
    """An ``nn.Embedding`` with a low-rank update (Model Zoo's ``LoRA_Embedding``)."""

    def __init__(self, base: nn.Embedding, config: LoraConfig, name: str, seed: int) -> None:
        nn.Module.__init__(self)
        for attribute in (
            "num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type",
            "scale_grad_by_freq", "sparse",
        ):  # fmt: skip
            setattr(self, attribute, getattr(base, attribute))
        self.weight = base.weight
        r = config.r
        self._attach(config, name, seed, (r, self.num_embeddings), (self.embedding_dim, r))
        self.reset_lora_parameters()
        self.train(base.training)

    def reset_parameters(self) -> None:
        """The base table's own initialisation, then the adapters' (see the module)."""
        super().reset_parameters()
        if hasattr(self, "lora_A"):
            self.reset_lora_parameters()

    @torch.no_grad()
    def reset_lora_parameters(self) -> None:
        """``lora_A`` zeros, ``lora_B`` normal (the other way round from a Linear's)."""
        nn.init.zeros_(self.lora_A)
        nn.init.normal_(self.lora_B, generator=_generator(self.lora_seed, self.lora_name))

    def delta(self) -> torch.Tensor:
        """``(B A)^T * scaling`` (``[num_embeddings, dim]``)."""
        return (self.lora_B @ self.lora_A).transpose(0, 1) * self.scaling

    def train(self, mode: bool = True) -> LoraEmbedding:
        """As ``nn.Module.train``; with ``merge_weights``, ``eval()`` merges the update."""
        super().train(mode)
        self._set_merged(not mode)
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows of ``W``, plus ``A^T[ids] B^T * scaling`` unless merged or switched off."""
        result = super().forward(ids)
        if self.merged or self.adapters_off:
            return result
        rows = functional.embedding(
            ids, self.lora_A.transpose(0, 1), self.padding_idx, self.max_norm,
            self.norm_type, self.scale_grad_by_freq, self.sparse,
        )  # fmt: skip
        return result + (rows @ self.lora_B.transpose(0, 1)) * self.scaling

    def extra_repr(self) -> str:
        """The base table's, with the rank and scaling."""
        return f"{super().extra_repr()}, r={self.config.r}, scaling={self.scaling:g}"


def lora_layers(model: nn.Module) -> dict[str, LoraLinear | LoraEmbedding]:
    """The model's LoRA layers by module name."""
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, LoraLinear | LoraEmbedding)
    }
