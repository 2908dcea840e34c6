"""The ``Lora`` callback: Model Zoo's LoRA fine-tuning, applied when the Trainer builds the model.

``callbacks: [{Lora: {lora_params: {r: 8, alpha: 16, target_modules: [...]}}}]``. In
``on_model_built`` the targeted layers are wrapped (:mod:`.apply`) and every other parameter is
frozen, before any checkpoint loads, so the optimizer holds state for the adapters only. Loading
a checkpoint without adapters treats it as the base (:mod:`.checkpoints`); with
``adapter_only_checkpoints: true`` each checkpoint holds the adapters and a reference to that
base instead of the whole model.

Under bfloat16 autocast (a fit on one CPU or GPU process) the frozen Linear weights may be held
in bfloat16 where the checkpoint holds them so (:mod:`.bfloat16_base`): the same steps in half
the memory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from plugtrain.conversion.meta_build.bfloat16 import hold_in_bfloat16
from plugtrain.errors import CheckpointMismatchError, ConfigError, ConfigIssue
from plugtrain.protocols import TrainerView
from plugtrain_models.lora.apply import apply_lora, is_adapter
from plugtrain_models.lora.bfloat16_base import allow_bfloat16_base
from plugtrain_models.lora.checkpoints import RUN_PARTS, base_fingerprint, full, read_base_weights
from plugtrain_models.lora.config import lora_configs
from plugtrain_models.lora.export import export_peft_adapter, fold_for_export
from plugtrain_models.lora.layers import lora_layers

__all__ = ["Lora"]

log = logging.getLogger("plugtrain")


class Lora:
    """Low-rank adapters on a model's Linear and Embedding layers (Model Zoo's ``Lora``).

    :param lora_params: one group of Model Zoo's ``LoraConfig`` keys, or a list of groups (a
        layer takes the first group it matches).
    :param adapter_only_checkpoints: checkpoints hold the adapters, their optimizer state and a
        reference to the base weights, not the whole model.
    """

    fold_for_export = staticmethod(fold_for_export)
    export_adapter = staticmethod(export_peft_adapter)

    def __init__(
        self,
        *,
        lora_params: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        adapter_only_checkpoints: bool = False,
    ) -> None:
        self.configs = lora_configs(lora_params)
        self.adapter_only = adapter_only_checkpoints
        self.base: dict[str, Any] = {"path": None, "fingerprint": None}
        """The base weights: the file they were loaded from (``None``: as built) and their
        fingerprint (``None`` until a checkpoint is saved or loaded)."""
        self._unfingerprinted: nn.Module | None = None
        """The model whose base weights were loaded and are not fingerprinted yet."""
        self.layers: dict[str, dict[str, Any]] = {}
        self._model: nn.Module | None = None
        self._saving = False
        self._loaded_base: str | None = None

    def on_model_built(self, trainer: TrainerView, model: nn.Module) -> nn.Module:
        """Wrap the targeted layers and freeze everything else (see :mod:`.apply`)."""
        seed = getattr(trainer, "seed", None) or 0
        prepare = getattr(model, "prepare_for_adapters", None)
        if callable(prepare):  # e.g. DPO: its reference becomes the base without adapters
            prepare()
        try:
            report = apply_lora(model, self.configs, seed=seed)
        except ValueError as exc:
            raise ConfigError([ConfigIssue("Lora.lora_params", str(exc))]) from exc
        model = report["model"]
        self._model = model
        self.layers = {
            name: {
                "kind": "embedding" if isinstance(layer, nn.Embedding) else "linear",
                "r": layer.config.r,
                "alpha": layer.config.alpha,
                "scaling": layer.scaling,
            }
            for name, layer in lora_layers(model).items()
        }

        def adapters_only(_module: Any, state: dict[str, Any], prefix: str, _meta: Any) -> None:
            if self._saving and not prefix:
                for name in [n for n in state if not is_adapter(n)]:
                    del state[name]

        model.register_state_dict_post_hook(adapters_only)
        allow_bfloat16_base(trainer, model)
        share = 100 * report["trainable"] / max(report["total"], 1)
        log.info(
            "LoRA: %d layers adapted; %d of %d parameters train (%.3g%%)",
            len(report["layers"]), report["trainable"], report["total"], share,
        )  # fmt: skip
        return model

    # -- saving ---------------------------------------------------------------------------------

    def on_before_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """Note the base's fingerprint; with adapter-only checkpoints, then save adapters only.

        Every process comes here (the fingerprint gathers sharded tensors).
        """
        self._fingerprint_loaded_base()
        if not self.adapter_only:
            return
        if self.base["fingerprint"] is None:
            self.base["fingerprint"] = base_fingerprint(trainer.unwrapped_model.state_dict())
        self._saving = True

    def on_after_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """The whole state again."""
        self._saving = False

    def state_dict(self) -> dict[str, Any]:
        """The base reference, the adapted layers and whether checkpoints hold adapters only."""
        self._fingerprint_loaded_base()
        return {
            "base": dict(self.base),
            "layers": {name: dict(entry) for name, entry in self.layers.items()},
            "adapter_only": self.adapter_only,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Keep the saved base reference and layers (the adapters are in the model's state)."""
        if self._loaded_base is None:
            self.base = dict(state.get("base") or self.base)
        self.layers = {n: dict(e) for n, e in (state.get("layers") or self.layers).items()}

    # -- loading --------------------------------------------------------------------------------

    def on_before_load_checkpoint(self, trainer: TrainerView, state: dict[str, Any]) -> None:
        """A base without adapters, or adapters without their base: complete the model's state."""
        self._loaded_base = None
        self._unfingerprinted = None  # a base loaded before is not this checkpoint's
        weights = state.get("model")
        if not isinstance(weights, dict):
            return
        model = trainer.unwrapped_model
        own = model.state_dict()
        adapters = [name for name in own if is_adapter(name)]
        if not any(name in weights for name in adapters):
            self._load_as_base(state, weights, own, adapters)
        elif any(not is_adapter(name) and name not in weights for name in own):
            self._add_base(trainer, state, weights, own)
        held = hold_in_bfloat16(model, weights)  # the types the weights come in (see the module)
        if held:
            log.info(
                "LoRA: %d frozen Linear weights held in bfloat16, as the checkpoint gives", held
            )

    def _load_as_base(
        self, state: dict[str, Any], weights: dict[str, Any], own: Mapping[str, Any],
        adapters: list[str],
    ) -> None:  # fmt: skip
        for name in adapters:
            weights[name] = full(own[name]).detach().cpu().clone()
        dropped = [part for part in RUN_PARTS if part in state]
        for part in dropped:
            del state[part]
        self._loaded_base = "loaded"
        log.info(
            "LoRA: the checkpoint holds no adapters: its weights are the base, the adapters "
            "start fresh%s",
            f" (its {', '.join(dropped)} left out: the fine-tune starts at step 0)"
            if dropped else "",
        )  # fmt: skip

    def _add_base(
        self,
        trainer: TrainerView,
        state: dict[str, Any],
        weights: dict[str, Any],
        own: Mapping[str, Any],
    ) -> None:
        saved = _saved_state(state.get("callbacks"))
        reference = dict(saved.get("base") or {})
        if not reference:
            message = (
                "the checkpoint holds adapters without their base weights, and no reference to "
                "them (its Lora callback's state is missing): load it into a fit from its base, "
                "or export it folded from a whole checkpoint"
            )
            raise CheckpointMismatchError(message)
        path = reference.get("path")
        if path is not None:
            base = read_base_weights(path, trainer.unwrapped_model)
            base = {n if n in own else _with_prefix(n, own): t for n, t in base.items()}
        else:  # the base was the model as built from the seed
            base = {n: full(t).detach().cpu() for n, t in own.items() if not is_adapter(n)}
        for name in own:
            if not is_adapter(name) and name not in weights and name in base:
                weights[name] = base[name]
        found = base_fingerprint({n: weights[n] for n in own if n in weights})
        expected = reference.get("fingerprint")
        if expected is not None and found != expected:
            where = path if path is not None else "the model as built (no base file)"
            message = (
                f"this adapter-only checkpoint was trained on other base weights than {where} "
                f"holds (fingerprint {found[:12]}, the checkpoint needs {expected[:12]})"
            )
            raise CheckpointMismatchError(message)
        self.base = reference

    def on_load_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        """Remember the file a base was loaded from, as given (a relative path stays relative).

        Adapter-only checkpoints and PEFT exports (``base_model_name_or_path``) name it.

        The base's fingerprint is taken when a checkpoint is first saved (or this callback's
        state first asked for), not here: hashing every base weight costs seconds on a large
        model, and a run that saves nothing never needs it. The base weights are frozen, so
        it is the fingerprint of what was loaded; were they changed in between, it is that
        of the weights the saved adapters were trained on, which a resume then rightly asks
        the base file to hold.
        """
        if self._loaded_base is not None:
            self.base = {"path": str(path), "fingerprint": None}
            self._unfingerprinted = trainer.unwrapped_model

    def _fingerprint_loaded_base(self) -> None:
        model, self._unfingerprinted = self._unfingerprinted, None
        if model is None:
            return
        saving, self._saving = self._saving, False  # the whole state, adapters and base
        try:
            self.base["fingerprint"] = base_fingerprint(model.state_dict())
        finally:
            self._saving = saving


def _saved_state(callbacks: Any) -> Mapping[str, Any]:
    for entry in callbacks or []:
        if isinstance(entry, Mapping) and entry.get("name") == "Lora":
            return entry.get("state") or {}
    return {}


def _with_prefix(name: str, own: Mapping[str, Any]) -> str:
    return f"model.{name}" if f"model.{name}" in own else name
