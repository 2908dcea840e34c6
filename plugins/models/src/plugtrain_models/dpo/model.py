"""``dpo``: Model Zoo's DPO model, a policy decoder trained against a frozen reference.

``policy_model`` is a :class:`~plugtrain_models.model.DecoderLM` of any family; ``ref_model`` a
copy of it, frozen, evaluated in eval mode without gradients. The copy is made from the policy
when first needed (the first forward, or a ``state_dict``), so that it holds the weights the
policy was loaded with; a checkpoint that holds ``ref_model.*`` loads it as saved. With a
``Lora`` callback there is no copy: the reference is the policy with its adapters switched off
(one copy of the base weights). ``reference_free`` has no reference at all.

A batch holds ``chosen_{input_ids,attention_mask,labels}`` and ``rejected_...`` ``[B, S]``
(Model Zoo's DPO HDF5 rows; the masks are loss masks over the responses). Both are scored in
one forward of ``2B`` rows; the result holds the loss and Model Zoo's summaries
(``chosen_rewards``, ``rejected_rewards``, ``reward_accuracies``, ``reward_margins``,
``policy_chosen_logps``, ``policy_rejected_logps``), batch means.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.dpo.loss import pair_outputs, response_logps
from plugtrain_models.dpo.schemas import DpoArgs, DpoParameters, policy_keys
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.disabled import adapters_disabled
from plugtrain_models.model import DecoderLM

__all__ = ["DpoModel", "disable_dropout", "dpo"]

Batch = Mapping[str, torch.Tensor]
SIDES = ("chosen", "rejected")


def disable_dropout(model: nn.Module) -> None:
    """Every dropout of ``model`` to 0: ``nn.Dropout`` modules and attention's probability."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        elif isinstance(getattr(module, "dropout", None), float):
            setattr(module, "dropout", 0.0)  # noqa: B010 (attention: a float torch types as Module)


class DpoModel(nn.Module):
    """Model Zoo's DPO (see the module)."""

    metrics_wanted: bool = True
    """Read by the Trainer's protocol; the summaries cost nothing beyond the loss here."""

    def __init__(self, policy: DecoderLM, keys: Mapping[str, Any]) -> None:
        super().__init__()
        self.family = "dpo"
        self.dpo_keys = dict(keys)
        """The ``model:`` keys it was built from, defaults filled in."""
        self.model_keys = dict(policy.model_keys or {})
        """The policy's keys: what a Hugging Face checkpoint's ``config.json`` is compared with."""
        params = keys["dpo"]
        self.beta = float(params["beta"])
        self.loss_type = str(params["loss_type"])
        self.reference_free = bool(params["reference_free"])
        self.dpop_penalty_weight = float(params["dpop_penalty_weight"])
        self.dropout_disabled = bool(params["disable_dropout"])
        self.compute_eval_metrics = bool(keys["compute_eval_metrics"])
        self.adapter_reference = False
        """The reference is the policy with its LoRA adapters switched off."""
        if self.dropout_disabled:
            disable_dropout(policy)
        self.policy_model = policy
        self.register_state_dict_pre_hook(_reference_before_saving)
        self._register_load_state_dict_pre_hook(_decoder_state_into_policy, with_module=True)

    # -- the reference ---------------------------------------------------------------------

    @property
    def reference(self) -> DecoderLM | None:
        """The frozen reference copy (made now if it is wanted and not made yet), else ``None``."""
        if self.reference_free or self.adapter_reference:
            return None
        ref = self._modules.get("ref_model")
        if ref is None:
            ref = copy.deepcopy(self.policy_model)
            ref.requires_grad_(False)
            ref.eval()
            self.ref_model = ref
        assert isinstance(ref, DecoderLM)
        return ref

    def prepare_for_adapters(self) -> None:
        """Before LoRA wraps the policy: the reference becomes the base without adapters."""
        self.adapter_reference = not self.reference_free
        self._modules.pop("ref_model", None)

    def train(self, mode: bool = True) -> DpoModel:
        """As ``nn.Module.train``; the reference stays in eval mode."""
        super().train(mode)
        ref = self._modules.get("ref_model")
        if ref is not None:
            ref.eval()
        return self

    # -- the decoder's protocol --------------------------------------------------------------

    @property
    def checkpoint_converter(self) -> str:
        """The policy family's converter: one Hugging Face folder fills policy and reference."""
        return self.policy_model.family

    def checkpoint_weights(self, weights: Mapping[str, Any]) -> Mapping[str, Any]:
        """A decoder's weights (``model.*``: an SFT run, a Hugging Face folder) named as here.

        They fill the policy, and the reference when it is a copy; a DPO checkpoint's weights
        (``policy_model.*``) are returned as they are.
        """
        if any(name.startswith("policy_model.") for name in weights):
            return weights
        copies = not (self.reference_free or self.adapter_reference)
        renamed: dict[str, Any] = {}
        for name, tensor in weights.items():
            if not name.startswith("model."):
                renamed[name] = tensor
                continue
            renamed["policy_model." + name] = tensor
            if copies:
                renamed["ref_model." + name] = tensor
        return renamed

    @property
    def settings(self) -> Any:
        """The policy's resolved decoder settings."""
        return self.policy_model.settings

    @torch.no_grad()
    def init_weights(self) -> None:
        """The policy's values as construction gives them; the reference copies it again."""
        self.policy_model.init_weights()
        ref = self._modules.get("ref_model")
        if ref is not None:
            ref.load_state_dict(self.policy_model.state_dict())

    @property
    def lr_adjustment_groups(self) -> dict[str, tuple[str, ...]]:
        """The policy's parameter groups (their globs match under ``policy_model.``)."""
        return self.policy_model.lr_adjustment_groups

    def learning_rate_factors(self) -> dict[str, float]:
        """The policy's own ``adjust_learning_rate`` factors (muP)."""
        return self.policy_model.learning_rate_factors()

    def num_tokens(self, batch: Batch) -> int:
        """Every chosen and rejected token of ``batch``, padding included."""
        if "chosen_input_ids" not in batch:
            return self.policy_model.num_tokens(batch)
        return int(batch["chosen_input_ids"].numel() + batch["rejected_input_ids"].numel())

    def repeated_blocks(self) -> list[nn.Module]:
        """The policy's decoder layers."""
        return self.policy_model.repeated_blocks()

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The policy's next-token logits (generation)."""
        return self.policy_model.logits(input_ids)

    # -- forward -------------------------------------------------------------------------------

    def pair_logps(self, batch: Batch, model: DecoderLM) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sums, counts)`` ``[B, 2]``: chosen then rejected response log-probs of ``model``."""
        b, s = batch["chosen_input_ids"].shape

        def both(name: str) -> torch.Tensor:
            pair = [batch[f"{side}_{name}"] for side in SIDES]
            return torch.stack(pair, dim=1).reshape(2 * b, s)

        logits = model.model(both("input_ids").long())[0]
        sums, counts = response_logps(logits, both("labels"), both("attention_mask"))
        return sums.view(b, 2), counts.view(b, 2)

    def _reference_logps(self, batch: Batch) -> torch.Tensor | None:
        if self.reference_free:
            return None
        with torch.no_grad():
            ref = self.reference
            if ref is not None:
                return self.pair_logps(batch, ref)[0]
            policy, was_training = self.policy_model, self.policy_model.training
            with adapters_disabled(policy):  # first: eval() then merges no update
                policy.eval()
                try:
                    return self.pair_logps(batch, policy)[0]
                finally:
                    policy.train(was_training)

    def forward(self, batch: Batch | torch.Tensor) -> Any:
        """The loss mapping for a DPO batch (see the module); else the policy's own forward."""
        if not isinstance(batch, Mapping) or "chosen_input_ids" not in batch:
            return self.policy_model(batch)
        reference = self._reference_logps(batch)
        sums, counts = self.pair_logps(batch, self.policy_model)
        loss, metrics = pair_outputs(
            sums, counts, reference, beta=self.beta, loss_type=self.loss_type,
            dpop_penalty_weight=self.dpop_penalty_weight,
        )  # fmt: skip
        result: dict[str, Any] = {"loss": loss, "num_examples": int(sums.shape[0])}
        if self.training or self.compute_eval_metrics:
            result.update(metrics)
        return result


def _reference_before_saving(module: nn.Module, prefix: str, keep_vars: bool) -> None:
    """A saved DPO state holds the reference it trains against."""
    assert isinstance(module, DpoModel)
    _ = module.reference


def _decoder_state_into_policy(
    module: nn.Module, state: dict[str, Any], prefix: str, *rest: Any
) -> None:
    """A decoder's state (``model.*``: a Hugging Face folder, an SFT checkpoint) fills the policy.

    The reference is then the policy's copy: made from it later, or filled now when it exists;
    a state holding ``ref_model.*`` loads the reference as saved.
    """
    assert isinstance(module, DpoModel)
    plain, policy, ref = prefix + "model.", prefix + "policy_model.", prefix + "ref_model."
    for name in [n for n in state if n.startswith(plain)]:
        state.setdefault(policy + name[len(prefix) :], state.pop(name))
    holds_reference = any(n.startswith(ref) for n in state)
    if holds_reference and not module.reference_free and not module.adapter_reference:
        _ = module.reference  # registered before the children load, so that it loads
    elif "ref_model" in module._modules:
        for name in [n for n in state if n.startswith(policy)]:
            state.setdefault(ref + name[len(policy) :], state[name])


def dpo(**arguments: Any) -> DpoModel:
    """Model Zoo's ``dpo`` (keys: :class:`~plugtrain_models.dpo.schemas.DpoArgs`)."""
    keys = validated_arguments(DpoArgs, arguments, owner="dpo")
    keys["dpo"] = validated_arguments(DpoParameters, keys["dpo"] or {}, owner="dpo.dpo")
    family, policy = policy_keys(keys["policy_model"])
    return DpoModel(build_decoder(family, policy), keys)


dpo.__signature__ = constructor_signature(DpoArgs)  # type: ignore[attr-defined]
