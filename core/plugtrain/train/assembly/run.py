"""Running a run file: build each trainer from its validated plan and fit or validate it.

Everything here reads a :class:`~plugtrain.config.plan.RunPlan` and builds through the one
registry that validated it; nothing parses the run file's mappings again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from plugtrain.config.plan import RunPlan, TrainerPlan, ValidateAllPlan, ValidatePlan
from plugtrain.discovery.attribution import attribute_error
from plugtrain.errors import ComponentError, ConfigError, ConfigIssue
from plugtrain.registry.components import Registry
from plugtrain.train.components import build_component

__all__ = ["AfterFit", "run_plan"]

AfterFit = Callable[[TrainerPlan, Any], None]
"""Called with a trainer's plan and its Trainer after its ``fit`` (the CLI draws the plot)."""

log = logging.getLogger("plugtrain")


def _fit_evaluated_it(fit: Any, validate: ValidatePlan) -> bool:
    """Whether ``validate`` would evaluate what the end of ``fit`` just evaluated.

    The same model (no other checkpoint asked for) on the same data: Model Zoo evaluates the
    final checkpoint once.
    """
    if fit is None or fit.val_dataloader is None or validate.ckpt_path_given:
        return False
    return bool(fit.val_dataloader.to_mapping() == validate.val_dataloader.to_mapping())


def _loads_weights(plan: TrainerPlan, mode: str) -> bool:
    """Whether the run loads a checkpoint into the model before it uses it.

    A fit given a ``ckpt_path`` starts from it (or resumes its run's newest checkpoint); a
    validate-only run evaluates the ``ckpt_path`` given, else the newest checkpoint (or fails).
    """
    fit, validate = plan.fit, plan.validate
    if mode == "fit" and fit is not None:
        return fit.ckpt_path_given and fit.ckpt_path is not None
    if mode == "validate" and validate is None and fit is not None and fit.val_dataloader:
        return True
    if mode in ("fit", "validate") and validate is not None:
        return not validate.ckpt_path_given or validate.ckpt_path is not None
    return False


def _ckpt_argument(section: Any) -> dict[str, Any]:
    return {"ckpt_path": section.ckpt_path} if section.ckpt_path_given else {}


def run_plan(
    plan: RunPlan, registry: Registry, *, mode: str = "fit", after_fit: AfterFit | None = None
) -> list[Any]:
    """Run the trainers of a validated plan in order.

    :param registry: the registry the plan was validated with.
    :param after_fit: called after each trainer's ``fit`` (on every process).
    :param mode: ``"fit"`` runs each trainer's ``fit`` then its ``validate`` section;
        ``"validate"`` runs only ``validate`` sections (or evaluates ``fit.val_dataloader``);
        ``"validate_all"`` runs only ``validate_all`` sections.
    :returns: the final validation metrics of each trainer; with ``"validate_all"``, each
        trainer's list of records (one per checkpoint and data loader).
    """
    for warning in plan.warnings:
        log.warning("warning: %s", warning)
    if mode == "validate_all" and all(t.validate_all is None for t in plan.trainers):
        message = "nothing to do: no trainer has a validate_all section"
        raise ConfigError([ConfigIssue("", message, plan.source)])
    from plugtrain.config.plan import plain
    from plugtrain.train.assembly.trainers import build_trainer  # imports torch

    backends: dict[str, Any] = {}
    results: list[Any] = []
    for trainer_plan in plan.trainers:
        if mode == "validate_all":
            if trainer_plan.validate_all is not None:
                trainer = build_trainer(trainer_plan, registry, backends)
                results.append(_validate_all(trainer, trainer_plan.validate_all, registry))
            continue
        loads = _loads_weights(trainer_plan, mode)
        trainer = build_trainer(trainer_plan, registry, backends, weights_loaded=loads)
        metrics: dict[str, float] = {}
        fit = trainer_plan.fit
        if mode == "fit" and fit is not None:
            train = build_component(registry, "dataloader", fit.train_dataloader)
            spec = fit.train_dataloader
            trainer.data_description = {"name": spec.name, "arguments": plain(spec.arguments)}
            val = (
                build_component(registry, "dataloader", fit.val_dataloader)
                if fit.val_dataloader
                else None
            )
            with _blaming(registry, "fit", trainer):
                metrics = trainer.fit(train, val, **_ckpt_argument(fit))
            if after_fit is not None:
                after_fit(trainer_plan, trainer)
        validate = trainer_plan.validate
        if validate is None and mode == "validate" and fit and fit.val_dataloader:
            validate = ValidatePlan(fit.val_dataloader)
        if validate is not None and metrics and _fit_evaluated_it(fit, validate):
            log.info(
                "validate: the checkpoint of step %d was evaluated on the same data at the "
                "end of fit; its metrics stand",
                trainer.global_step,
            )
        elif validate is not None:
            val = build_component(registry, "dataloader", validate.val_dataloader)
            with _blaming(registry, "validate", trainer):
                metrics = trainer.validate(val, **_ckpt_argument(validate))
        results.append(metrics)
    for backend in backends.values():
        backend.close()  # e.g. leave a data-parallel process group together
    return results


@contextlib.contextmanager
def _blaming(registry: Registry, phase: str, trainer: Any) -> Iterator[None]:
    """Name the plugin whose code raised (run-file and ``-p`` plugins too), the phase and step."""
    try:
        yield
    except Exception as exc:
        blamed = attribute_error(exc, registry)
        if blamed is None:
            raise
        step = int(getattr(trainer, "global_step", 0))
        where = f"in fit, during step {step + 1}" if phase == "fit" else f"in {phase}, step {step}"
        raise ComponentError(f"{blamed} ({where})") from exc


def _validate_all(trainer: Any, section: ValidateAllPlan, registry: Registry) -> list[Any]:
    """Run one trainer's ``validate_all``: data loaders named ``INDEX:Name``."""
    loaders = {
        f"{index}:{spec.name}": build_component(registry, "dataloader", spec)
        for index, spec in enumerate(section.val_dataloaders)
    }
    if section.ckpt_paths_given:
        paths = list(section.ckpt_paths) if section.ckpt_paths is not None else None
        return trainer.validate_all(loaders, paths)  # type: ignore[no-any-return]
    return trainer.validate_all(loaders)  # type: ignore[no-any-return]
