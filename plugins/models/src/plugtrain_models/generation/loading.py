"""The model a run file describes, with the weights ``--ckpt`` names, for generation and lm-eval.

The first trainer of the run file builds its model (on its backend's device; a Cerebras run
file's model runs on this machine's GPU, else CPU), with its ``Lora`` callback applied when it
has one (a LoRA checkpoint, whole or adapter-only, loads as ``fit`` wrote it), and loads, in
this order: ``--ckpt`` (a plugtrain checkpoint, or a Hugging Face folder, opened as ``fit``
opens it: its ``config.json`` must describe the run file's model), the newest checkpoint in
``model_dir``, the run file's ``fit.ckpt_path``; with none, the model stays as initialised.
On the CPU the model is built on ``meta`` and never initialised when a checkpoint loads
(:mod:`plugtrain.conversion.meta_build`).
A run file needs no ``fit`` or ``validate`` section here, nor the data they name: when its
work sections do not check (none given, a data folder not on this machine), only what builds
the model is checked.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import attrs
import torch

from plugtrain import Trainer, build_component
from plugtrain.config import load_plan
from plugtrain.config.plan import TrainerPlan
from plugtrain.conversion import build_for_loading, fill_pending
from plugtrain.errors import ConfigError
from plugtrain.registry import Registry

__all__ = ["LoadedRun", "data_tokenizer", "load_run", "model_defaults"]

log = logging.getLogger("plugtrain")

MODEL_CHANGING = frozenset({"Lora"})
"""Callbacks whose ``on_model_built`` changes the model that checkpoints hold."""


@attrs.frozen
class LoadedRun:
    """A run file's first trainer, its registry, and a Trainer holding the loaded model.

    :param source: where the weights came from (``None``: as initialised).
    """

    plan: TrainerPlan
    registry: Registry
    trainer: Trainer
    source: str | None

    @property
    def model(self) -> torch.nn.Module:
        """The model with its weights loaded."""
        return self.trainer.unwrapped_model


def _device(plan: TrainerPlan) -> str:
    kind = plan.backend.backend_type
    if kind == "GPU" or (kind not in ("CPU", "GPU") and torch.cuda.is_available()):
        return "GPU"
    return "CPU"


def _model_changing(plan: TrainerPlan) -> list[Any]:
    """The run file's callbacks that change the model its checkpoints hold (``Lora``)."""
    return [
        spec for spec in plan.callbacks
        if str(getattr(spec, "name", "")).rsplit(":", 1)[-1] in MODEL_CHANGING
    ]  # fmt: skip


def _load(trainer: Trainer, plan: TrainerPlan, ckpt: str | None) -> str | None:
    if ckpt is None:
        found = trainer.checkpointer.list_checkpoints()
        if found:
            ckpt = str(found[0][1])
        elif plan.fit is not None and plan.fit.ckpt_path:
            ckpt = plan.fit.ckpt_path
    if ckpt is None:
        sys.stderr.write(
            "plugtrain: warning: no checkpoint given or found: the model is untrained\n"
        )
        return None
    trainer.load_checkpoint(ckpt)  # a Hugging Face folder too, as fit opens it
    return ckpt


def load_run(run_file: str, overrides: list[str], ckpt: str | None) -> LoadedRun:
    """Build the run file's first model and load its weights (see the module).

    :raises ConfigError: the run file is not valid.
    :raises CheckpointError: the checkpoint is missing or does not fit the model.
    """
    try:
        plan, registry = load_plan(run_file, overrides, import_local=True)
    except ConfigError:  # a model alone, or data that is not here: the model is what is used
        plan, registry = load_plan(run_file, overrides, import_local=True, model_only=True)
    first = plan.trainers[0]
    device = _device(first)

    def build() -> torch.nn.Module:
        model: torch.nn.Module = build_component(registry, "model", first.model)
        return model

    trainer = Trainer(
        device=device, model_dir=first.model_dir, seed=first.seed, registry=registry,
        config=first.config,
        model=(lambda: build_for_loading(build)) if device == "CPU" else build,
        callbacks=[build_component(registry, "callback", spec) for spec in _model_changing(first)],
    )  # fmt: skip
    source = _load(trainer, first, ckpt)
    fill_pending(trainer.unwrapped_model)  # no checkpoint: the model as initialised
    return LoadedRun(first, registry, trainer, source)


def model_defaults(plan: TrainerPlan) -> dict[str, Any]:
    """The model section's generation keys as written (``None`` where unset)."""
    keys = ("start_token", "stop_sequences", "max_tokens", "temperature", "top_k", "top_p")
    return {key: plan.model.arguments.get(key) for key in keys}


def _data_dirs(plan: TrainerPlan) -> list[str]:
    specs = []
    if plan.fit is not None:
        specs += [plan.fit.train_dataloader, plan.fit.val_dataloader]
    if plan.validate is not None:
        specs.append(plan.validate.val_dataloader)
    if plan.validate_all is not None:
        specs += list(plan.validate_all.val_dataloaders)
    folders: list[str] = []
    for spec in specs:
        written = spec.arguments.get("data_dir") if spec is not None else None
        folders += [written] if isinstance(written, str) else list(written or [])
    return [str(folder) for folder in folders]


def data_tokenizer(plan: TrainerPlan) -> tuple[str, int | None] | None:
    """The tokenizer the run file's data was written with, and its EOS id, if recorded.

    ``plugtrain preprocess`` (and Model Zoo's preprocessing) record it in each data folder's
    ``data_params.json``: ``processing.huggingface_tokenizer`` (a folder) or
    ``processing.tokenizer`` (``bytes`` or a ``tokenizer.json``). A relative path is taken as
    written, else beside the data folder.
    """
    for folder in _data_dirs(plan):
        try:
            params = json.loads((Path(folder) / "data_params.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        processing = params.get("processing", {}) if isinstance(params, dict) else {}
        eos = params.get("eos_id", processing.get("eos_id"))
        for key in ("huggingface_tokenizer", "tokenizer"):
            spec = processing.get(key)
            if not isinstance(spec, str):
                continue
            for candidate in (spec, str(Path(folder) / spec)):
                if candidate == "bytes" or Path(candidate).exists():
                    return candidate, eos if isinstance(eos, int) else None
    return None
