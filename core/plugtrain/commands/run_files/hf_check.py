"""``plugtrain check``: a ``ckpt_path`` naming a Hugging Face folder must describe the run's model.

Its ``config.json`` is converted to ``model:`` keys by the model's checkpoint converter and
compared with the run file's, key by key, by :func:`plugtrain.conversion.open_checkpoint` (no
tensor read); each disagreement is an issue at the key's line (or at the model section, for a
key left at its default). Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plugtrain.config.plan import RunPlan, TrainerPlan
from plugtrain.config.reading.yaml_loader import location_of
from plugtrain.errors import ConfigIssue, PlugtrainError, UnknownNameError
from plugtrain.registry.components import Registry

__all__ = ["hf_checkpoint_issues"]


def _checkpoint_paths(trainer: TrainerPlan) -> Iterator[tuple[str, str]]:
    if trainer.fit is not None and trainer.fit.ckpt_path:
        yield "fit.ckpt_path", trainer.fit.ckpt_path
    if trainer.validate is not None and trainer.validate.ckpt_path:
        yield "validate.ckpt_path", trainer.validate.ckpt_path
    if trainer.validate_all is not None:
        for index, path in enumerate(trainer.validate_all.ckpt_paths or ()):
            yield f"validate_all.ckpt_paths[{index}]", path


def _model_mapping(data: Any, trainer_path: str) -> Any:
    """The run file's ``model:`` mapping of the trainer at ``trainer_path``."""
    node = data
    for part in trainer_path.split("."):
        name, _, index = part.partition("[")
        node = node.get(name) if isinstance(node, Mapping) else None
        if index and isinstance(node, list):
            node = node[int(index.rstrip("]"))]
    init = node.get("init") if isinstance(node, Mapping) else None
    return init.get("model") if isinstance(init, Mapping) else None


def hf_checkpoint_issues(data: Any, plan: RunPlan, registry: Registry) -> list[ConfigIssue]:
    """Every key where a Hugging Face ``ckpt_path``'s ``config.json`` and the model differ.

    Each checkpoint is opened as ``fit`` opens it (:func:`plugtrain.conversion.open_checkpoint`,
    the converter the model's name names), as a dry run: no tensor is read.
    """
    from plugtrain.conversion import (
        ConfigMismatchError,
        describe_difference,
        is_hf_checkpoint,
        open_checkpoint,
    )
    from plugtrain.conversion.lookup import KIND

    issues: list[ConfigIssue] = []
    for trainer in plan.trainers:
        for where, path in _checkpoint_paths(trainer):
            if not is_hf_checkpoint(path):
                continue
            model = trainer.model
            mapping = _model_mapping(data, trainer.path)
            try:
                open_checkpoint(
                    path, registry, converter=model.name, model_keys=dict(model.arguments)
                )
            except ConfigMismatchError as exc:
                for key, hf_value, run_value in exc.differences:
                    top = key.split(".")[0]
                    written = isinstance(mapping, Mapping) and top in mapping
                    location = location_of(mapping, top) if written else model.location
                    default = "" if written else " (its default)"
                    difference = describe_difference(key, hf_value, run_value)
                    message = f"{exc.config_file} ({where}): {difference}{default}"
                    issues.append(ConfigIssue(f"{model.path}.{key}", message, location))
            except UnknownNameError:
                message = (
                    f"names a Hugging Face checkpoint, but model {model.name!r} has no "
                    f"checkpoint converter (plugtrain checkpoint list-converters: {KIND}s)"
                )
                issues.append(ConfigIssue(f"{trainer.path}.{where}", message, model.location))
            except (PlugtrainError, ValueError) as exc:
                issues.append(ConfigIssue(f"{trainer.path}.{where}", str(exc), model.location))
    return issues
