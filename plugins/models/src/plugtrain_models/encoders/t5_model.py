"""The trained ``t5`` / ``transformer`` module: the network under ``model`` and Model Zoo's loss.

``forward(batch)`` takes ``{input_ids, attention_mask, decoder_input_ids,
decoder_attention_mask, labels}`` (and ``loss_weight`` under ``precomputed_num_masked``) and
returns ``{"loss", "num_examples", ...}`` (``num_examples`` is the batch size; ``accuracy`` and
``token_loss``, the mean cross-entropy over the scored tokens, when metrics are wanted and
``compute_eval_metrics``). ``logits(batch)`` returns ``{"logits": [B, T, vocab + extra_ids]}``.
``decoder_attention_mask`` masks the loss only, never attention.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.encoders.schemas_t5 import T5Args
from plugtrain_models.encoders.t5 import T5Network
from plugtrain_models.encoders.t5_init import initialise_t5
from plugtrain_models.encoders.t5_loss import t5_loss
from plugtrain_models.encoders.t5_positions import FixedPositionEmbedding
from plugtrain_models.encoders.t5_settings import T5Settings, resolve_t5_settings
from plugtrain_models.loss import masked_accuracy

__all__ = ["LR_GROUPS", "EncoderDecoderLM", "T5ForConditionalGeneration", "t5", "transformer"]

LR_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": ("*embedding*weight",),
    "decoder_qkv_projection": (
        "*decoder*attn.proj_q*dense*weight",
        "*decoder*attn.proj_k*dense*weight",
        "*decoder*attn.proj_v*dense*weight",
    ),
    "decoder_output_projection": ("*decoder*attn.proj_output*dense*weight",),
    "decoder_input_ffn": ("*decoder*ffn.ffn.[!1]*weight",),
    "decoder_output_ffn": ("*decoder*ffn.ffn.[1]*weight",),
    "encoder_qkv_projection": (
        "*encoder*attn.proj_q*dense*weight",
        "*encoder*attn.proj_k*dense*weight",
        "*encoder*attn.proj_v*dense*weight",
    ),
    "encoder_output_projection": ("*encoder*attn.proj_output*dense*weight",),
    "encoder_input_ffn": ("*encoder*ffn.ffn.[!1]*weight",),
    "encoder_output_ffn": ("*encoder*ffn.ffn.[1]*weight",),
    "lm_head": ("*lm_head*weight",),
}
"""Model Zoo's learning-rate groups of T5 (full-match globs)."""


class EncoderDecoderLM(nn.Module):
    """Model Zoo's T5 or transformer computing Model Zoo's loss (see the module)."""

    checkpoint_aliases: Mapping[str, str] = {}
    """No two names of one tensor beyond the tied tables, which load under either name."""

    fsdp_modules = ("model.encoder.layers.*", "model.decoder.layers.*")
    """FSDP2's units when the backend names none: each block gets its own fully_shard."""

    metrics_wanted: bool = True
    """Whether a training forward computes ``accuracy`` and ``token_loss`` (the Trainer turns
    it off for steps whose metrics it does not log)."""

    def __init__(
        self, settings: T5Settings, family: str, keys: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.family = family
        self.model_keys = dict(keys) if keys is not None else None
        """The ``model:`` keys it was built from, defaults filled in (``None``: not known)."""
        # Model Zoo's initialisation sets every value: it draws from where construction began,
        # so that init_weights (after the same seed) draws the same values on a meta-built model
        start = torch.random.get_rng_state()
        self.model = T5Network(settings)
        torch.random.set_rng_state(start)
        initialise_t5(self.model)
        self._register_load_state_dict_pre_hook(_tied_either_name)

    @property
    def settings(self) -> T5Settings:
        """The resolved settings of the network."""
        return self.model.settings

    @property
    def checkpoint_converter(self) -> str:
        """Its family's checkpoint converter (a ``ckpt_path`` may name a Hugging Face folder)."""
        return self.family

    @torch.no_grad()
    def init_weights(self) -> None:
        """Give every parameter the value construction gives it, with the same draws.

        plugtrain's meta-device contract: the fixed position tables are computed again, then
        Model Zoo's initialisation draws every other value (after the same seed, the values of a
        model built whole).
        """
        for module in self.model.modules():
            if isinstance(module, FixedPositionEmbedding):
                module.reset_parameters()
        initialise_t5(self.model)

    @property
    def lr_adjustment_groups(self) -> dict[str, tuple[str, ...]]:
        """The named parameter groups ``adjust_learning_rate`` keys may name."""
        return dict(LR_GROUPS)

    @property
    def mup_lr_factors(self) -> dict[str, float]:
        """The learning-rate factor of each group under muP (empty without muP)."""
        s = self.settings
        if s.mup_width is None:
            return {}
        root = s.mup_width**-0.5
        factors = dict.fromkeys(("embedding", "lm_head"), root)
        factors.update(dict.fromkeys(("decoder_input_ffn", "encoder_input_ffn"), 1 / s.mup_width))
        for stack in ("decoder", "encoder"):
            factors[f"{stack}_qkv_projection"] = root
            factors[f"{stack}_output_projection"] = root
        if s.mup_base_d_ff is not None:
            ffn = s.mup_base_d_ff / s.d_ff
            factors.update(dict.fromkeys(("encoder_output_ffn", "decoder_output_ffn"), ffn))
        return factors

    def learning_rate_factors(self) -> dict[str, float]:
        """The model's own ``adjust_learning_rate`` factors (muP's, by group name)."""
        return self.mup_lr_factors

    def num_tokens(self, batch: Mapping[str, torch.Tensor]) -> int:
        """The tokens of ``batch``: every encoder and decoder input id, padding included."""
        decoder = batch.get("decoder_input_ids", batch.get("labels"))
        return int(batch["input_ids"].numel()) + (0 if decoder is None else int(decoder.numel()))

    def repeated_blocks(self) -> list[nn.Module]:
        """The encoder and decoder layers, for regional compile and checkpointing."""
        return [*self.model.encoder.layers, *self.model.decoder.layers]

    def _logits(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["input_ids"].long()
        mask = batch.get("attention_mask")
        decoder_ids = batch.get("decoder_input_ids")
        labels = batch.get("labels")
        return self.model(
            ids,
            mask,
            None if decoder_ids is None else decoder_ids.long(),
            None if labels is None else labels.long(),
        )

    def logits(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``{"logits": [B, T, vocab + extra_ids]}`` for a batch (no loss)."""
        return {"logits": self._logits(batch)}

    def forward(self, batch: Mapping[str, torch.Tensor]) -> Any:
        """The loss mapping for a batch with labels, else ``{"logits"}``."""
        logits = self._logits(batch)
        labels = batch.get("labels")
        if labels is None:
            return {"logits": logits}
        labels = labels.long()
        mask = batch.get("decoder_attention_mask")
        if mask is None:
            mask = torch.ones_like(labels)
        s = self.settings
        loss = t5_loss(
            logits, labels, mask, scaling=s.loss_scaling, weight=s.lm_loss_weight,
            loss_weight=batch.get("loss_weight"),
            label_smoothing=s.label_smoothing if self.training else 0.0,
        )  # fmt: skip
        result: dict[str, Any] = {"loss": loss, "num_examples": int(labels.shape[0])}
        if s.compute_eval_metrics and (self.metrics_wanted or not self.training):
            result["accuracy"] = masked_accuracy(logits, labels, mask)
            with torch.no_grad():
                result["token_loss"] = t5_loss(
                    logits, labels, mask, scaling="num_masked", weight=1.0
                )
        return result


def _tied_either_name(state: dict[str, Any], prefix: str, *args: Any) -> None:
    """Fill the tied tables' names the state lacks (a checkpoint may hold either)."""
    table = prefix + "model.encoder_embeddings.word_embeddings.weight"
    for name in (
        prefix + "model.decoder_embeddings.word_embeddings.weight",
        prefix + "model.lm_head.weight",
    ):
        if table in state:
            state.setdefault(name, state[table])
        elif name in state:
            state.setdefault(table, state[name])


def build_t5(family: str, arguments: Mapping[str, Any]) -> EncoderDecoderLM:
    """A ``t5`` or ``transformer`` model from its keys as written (validated, defaults filled)."""
    complete = validated_arguments(T5Args, arguments, owner=family)
    return EncoderDecoderLM(resolve_t5_settings(complete), family, complete)


def t5(**arguments: Any) -> EncoderDecoderLM:
    """Model Zoo's ``t5`` (keys: :class:`~plugtrain_models.encoders.schemas_t5.T5Args`)."""
    return build_t5("t5", arguments)


def transformer(**arguments: Any) -> EncoderDecoderLM:
    """Model Zoo's ``transformer``: T5's model and keys under another name."""
    return build_t5("transformer", arguments)


def T5ForConditionalGeneration(**arguments: Any) -> EncoderDecoderLM:
    """The deprecated name of ``t5`` (a ``FutureWarning``, as Model Zoo gives)."""
    warnings.warn(
        "Passing 'T5ForConditionalGeneration' as the model name is deprecated. "
        "Please use 't5' instead.",
        FutureWarning,
        stacklevel=2,
    )
    return build_t5("t5", arguments)


for _constructor in (t5, transformer, T5ForConditionalGeneration):
    _constructor.__signature__ = constructor_signature(T5Args)  # type: ignore[attr-defined]
