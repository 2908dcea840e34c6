"""The trained module: Model Zoo's decoder under ``model`` and its loss (plugtrain's protocol).

``forward(batch)`` takes ``{input_ids, attention_mask, labels}`` (plus ``position_ids`` and
``attention_span`` under VSL) and returns ``{"loss", "accuracy", "num_examples"}`` (in training,
``accuracy`` only while :attr:`DecoderLM.metrics_wanted`); ``logits(input_ids)`` returns
``[B, S, V]``. ``attention_mask`` is a loss mask only: pad tokens are attended causally like any
others, as in Model Zoo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain_models.decoder import LanguageModel
from plugtrain_models.ffn import load_balancing_loss
from plugtrain_models.head_loss import fusable, head_loss
from plugtrain_models.init import initialise
from plugtrain_models.loss import lm_loss, masked_accuracy
from plugtrain_models.settings import DecoderSettings

__all__ = ["IGNORE_INDEX", "LR_GROUPS", "DecoderLM"]

IGNORE_INDEX = -100
"""A label never scored, whatever the mask says (plugtrain's built-in loaders use it)."""

LR_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": ("*embedding*weight",),
    "decoder_kernel": (
        "*decoder*dense*weight",
        "*decoder*linear*weight",
        "*decoder*linear*expert_weights",
    ),
    "decoder_attention": ("*decoder*attn*dense*weight",),
    "decoder_input_ffn": ("*decoder*ffn.ffn.[!1]*weight",),
    "decoder_output_ffn": ("*decoder*ffn.ffn.[1]*weight",),
}
"""Model Zoo's learning-rate groups (full-match globs)."""


class DecoderLM(nn.Module):
    """A Model Zoo decoder language model computing Model Zoo's loss."""

    report_perplexity: bool
    """Evaluation reports exp(loss): on when the loss is a per-token mean (num_tokens)."""

    checkpoint_aliases: Mapping[str, str] = {"model.transformer_decoder.norm.": "model.ln_f."}
    """Prefixes naming the same tensors (the final norm is both ``transformer_decoder.norm``
    and ``ln_f``, as in Model Zoo): a checkpoint holding either name loads, strictly."""

    fsdp_modules = ("model.transformer_decoder.layers.*",)
    """FSDP2's units when the backend names none: each decoder block gets its own fully_shard."""

    metrics_wanted: bool = True
    """Whether a training forward computes its metrics (``accuracy``, and ``token_loss`` under
    ``batch_size`` loss scaling) besides the loss. The Trainer turns it off for the steps whose
    metrics it does not log (plugtrain's Model protocol), which then skip the argmax over every
    logit; evaluation always computes them."""

    def __init__(
        self, settings: DecoderSettings, family: str, keys: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.family = family
        self.model_keys = dict(keys) if keys is not None else None
        """The ``model:`` keys it was built from, defaults filled in (``None``: not known)."""
        # exp(loss) is the perplexity only when the loss is a per-token mean; under
        # batch_size scaling, token_loss carries that mean instead (see forward).
        self.report_perplexity = settings.loss_scaling == "num_tokens"
        self.model = LanguageModel(settings)
        initialise(self.model)
        self._register_load_state_dict_pre_hook(_final_norm_either_name)

    @property
    def checkpoint_converter(self) -> str:
        """Its family's checkpoint converter (a ``ckpt_path`` may name a Hugging Face folder)."""
        return self.family

    @torch.no_grad()
    def init_weights(self) -> None:
        """Give every parameter and buffer the value construction gives it, with the same draws.

        plugtrain's meta-device contract (see ``docs/sharded.md``): the Trainer may build the
        model on the ``meta`` device, shard it, and call this to fill each shard. Every module's
        ``reset_parameters`` runs in module order (the order construction creates them, so the
        random draws are the same), then Model Zoo's initialisation: after the same seed, the
        values equal those of a model built whole.
        """
        for module in self.model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
        initialise(self.model)

    @property
    def settings(self) -> DecoderSettings:
        """The resolved settings of the decoder."""
        return self.model.settings

    @property
    def lr_adjustment_groups(self) -> dict[str, tuple[str, ...]]:
        """The named parameter groups ``adjust_learning_rate`` keys may name."""
        groups = dict(LR_GROUPS)
        if self.settings.parallel:
            del groups["decoder_kernel"]
        return groups

    @property
    def mup_lr_factors(self) -> dict[str, float]:
        """The learning-rate factor of each group under muP (empty without muP)."""
        s = self.settings
        if s.mup_width is None or s.mup_filter is None:
            return {}
        return {
            "decoder_attention": 1 / s.mup_width,
            "decoder_input_ffn": 1 / s.mup_width,
            "decoder_output_ffn": 1 / s.mup_filter,
        }

    def learning_rate_factors(self) -> dict[str, float]:
        """The model's own ``adjust_learning_rate`` factors (plugtrain's Model protocol).

        muP's (:attr:`mup_lr_factors`) by group name; the Trainer applies them to the
        parameters that no ``adjust_learning_rate`` key of the run file names.
        """
        return self.mup_lr_factors

    def num_tokens(self, batch: Mapping[str, torch.Tensor] | torch.Tensor) -> int:
        """The tokens of ``batch`` (plugin API 1.1): every input id, padding included."""
        ids = batch["input_ids"] if isinstance(batch, Mapping) else batch
        return int(ids.numel())

    def repeated_blocks(self) -> list[nn.Module]:
        """The decoder layers (plugin API 1.1), for regional compile and checkpointing."""
        return list(self.model.transformer_decoder.layers)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[B, S, vocab_size]`` for ``input_ids``."""
        logits: torch.Tensor = self.model(input_ids)[0]
        return logits

    def forward(self, batch: Mapping[str, torch.Tensor] | torch.Tensor) -> Any:
        """The loss mapping for a batch with labels, else the logits (see the module)."""
        if not isinstance(batch, Mapping):
            return self.logits(batch)
        input_ids = batch["input_ids"]
        labels = batch.get("labels")
        extra = batch.get("position_ids"), batch.get("attention_span")
        s = self.settings
        if labels is not None and self.training and self._fusable():
            # the logits serve the loss and metrics alone: the head and the loss in one pass
            hidden, stats = self.model.trunk(input_ids, *extra)
            normed = self.model.ln_f(hidden)
            mask, labels = _scored(batch.get("attention_mask"), labels)
            if fusable(normed, self.model.lm_head):
                return self._fused_result(normed, labels, mask, stats)
            logits = self.model.logits_of(normed)
        else:
            logits, stats = self.model(input_ids, *extra)
            if labels is None:
                return logits
            mask, labels = _scored(batch.get("attention_mask"), labels)
        loss = lm_loss(logits, labels, mask, scaling=s.loss_scaling, weight=s.loss_weight)
        result = self._training_result(loss, stats, mask)
        if self.metrics_wanted or not self.training:
            result["accuracy"] = masked_accuracy(logits, labels, mask)
            if s.loss_scaling == "batch_size":  # its count-weighted mean is Model Zoo's U / sum(m)
                with torch.no_grad():
                    token_loss = lm_loss(logits, labels, mask, scaling="num_tokens", weight=1.0)
                result["token_loss"] = token_loss
        return result

    def _fused_result(
        self, normed: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, stats: list[Any]
    ) -> dict[str, Any]:
        """A training step's result from :func:`head_loss`.

        The unfused path's values (the loss; when wanted, accuracy and ``token_loss``), from
        the same fused pass either way: a step's update does not depend on whether it is logged.
        """
        s = self.settings
        loss, ce, predicted = head_loss(
            normed, self.model.lm_head, labels, mask, scaling=s.loss_scaling,
            weight=s.loss_weight, logits_scale=s.logits_scale, cap=s.final_cap,
            metrics=self.metrics_wanted,
        )  # fmt: skip
        result = self._training_result(loss, stats, mask)
        if predicted is not None:
            hits = (predicted == labels).float() * mask.float()
            result["accuracy"] = hits.sum() / (mask > 0).sum().clamp_min(1)
            if s.loss_scaling == "batch_size":  # masked_accuracy's and lm_loss's formulas
                m = mask.reshape(-1).to(ce.dtype)
                result["token_loss"] = (ce * m).sum() / m.sum().clamp_min(1.0)
        return result

    def _training_result(
        self, loss: torch.Tensor, stats: list[Any], mask: torch.Tensor
    ) -> dict[str, Any]:
        """``loss`` (plus the MoE balancing loss in training) and the scored token count."""
        s = self.settings
        if self.training and stats and s.moe is not None and s.moe.load_balancing_loss_coef:
            loss = loss + s.moe.load_balancing_loss_coef * load_balancing_loss(stats, mask)
        return {"loss": loss, "num_examples": int(mask.sum())}

    def _fusable(self) -> bool:
        """Whether the language model and its head are this package's own, unwrapped.

        Anything that replaces or hooks them (LoRA on the head, FSDP's per-module hooks, a
        forward hook) expects their ``forward`` to run; :func:`head_loss` bypasses it.
        """
        lm, head = self.model, self.model.lm_head
        return (
            type(lm) is LanguageModel
            and type(head) is nn.Linear
            and type(head.weight) is nn.Parameter
            and not any(_hooked(module) for module in (lm, head))
        )


def _hooked(module: nn.Module) -> bool:
    """Whether ``module`` has forward or backward hooks of its own."""
    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
    )


def _scored(mask: torch.Tensor | None, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss mask without unscored labels, and the labels with those set to 0.

    plugtrain's own loaders mark unscored labels -100 (cross_entropy's ignore_index); Model
    Zoo's data never holds it, so for its files this changes nothing.
    """
    if mask is None:
        mask = torch.ones_like(labels)
    scored = labels != IGNORE_INDEX
    return mask * scored, labels.masked_fill(~scored, 0)


def _final_norm_either_name(state: dict[str, Any], prefix: str, *args: Any) -> None:
    """Fill each name of :attr:`DecoderLM.checkpoint_aliases` the state lacks from the other."""
    for first, second in DecoderLM.checkpoint_aliases.items():
        for have, lack in ((prefix + first, prefix + second), (prefix + second, prefix + first)):
            for name in [n for n in state if n.startswith(have)]:
                state.setdefault(lack + name[len(have) :], state[name])
