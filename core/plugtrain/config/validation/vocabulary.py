"""Whether a trainer's data holds token ids its model has no embedding for (torch-free).

A data loader's schema may answer ``data_vocabulary(arguments) -> (size, source) | None``: the
number of token ids its batches can hold and where that is known from (a ``data_params.json``,
a tokenizer, byte-level text). A model whose ``vocab_size`` argument is smaller would fail at
its first step with an ``IndexError`` in its embedding; ``plugtrain check`` says so at the
model's ``vocab_size`` line instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain.config.plan import ComponentSpec, TrainerPlan
from plugtrain.config.validation.checker import Checker, Path
from plugtrain.errors import PlugtrainError

__all__ = ["check_vocabulary"]


def _loaders(plan: TrainerPlan) -> Iterator[ComponentSpec]:
    if plan.fit is not None:
        yield plan.fit.train_dataloader
        if plan.fit.val_dataloader is not None:
            yield plan.fit.val_dataloader
    if plan.validate is not None:
        yield plan.validate.val_dataloader
    if plan.validate_all is not None:
        yield from plan.validate_all.val_dataloaders


def _model_vocabulary(checker: Checker, model: ComponentSpec) -> int | None:
    value = model.arguments.get("vocab_size")
    if value is None:
        schema = checker.registry.lookup("model", model.name).schema_class
        fields = {f.name: f for f in attrs.fields(schema)} if attrs.has(schema) else {}
        field = fields.get("vocab_size")
        value = field.default if field is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _data_vocabulary(checker: Checker, loader: ComponentSpec) -> tuple[int, str] | None:
    schema = checker.registry.lookup("dataloader", loader.name).schema_class
    answer = getattr(schema, "data_vocabulary", None)
    if not callable(answer):
        return None
    try:
        found = answer(loader.arguments)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # the schema could not tell; the run-time check still names both numbers
    if not isinstance(found, tuple) or len(found) != 2 or not isinstance(found[0], int):
        return None
    return int(found[0]), str(found[1])


def check_vocabulary(
    checker: Checker, plan: TrainerPlan, init: Mapping[str, Any], path: Path
) -> None:
    """Add a problem at the model's ``vocab_size`` when a data loader holds more token ids.

    :param init: the trainer's ``init`` mapping as read (for the position of ``vocab_size``).
    """
    try:
        model_size = _model_vocabulary(checker, plan.model)
    except PlugtrainError:
        return
    if model_size is None:
        return
    for loader in _loaders(plan):
        try:
            found = _data_vocabulary(checker, loader)
        except PlugtrainError:
            continue
        if found is None or found[0] <= model_size:
            continue
        size, source = found
        message = (
            f"{model_size} is smaller than the vocabulary of {loader.path} ({size} token ids: "
            f"{source}); its token ids from {model_size} on have no embedding and would fail "
            f"the first step (IndexError): give vocab_size at least {size}"
        )
        spec = init.get("model")
        arguments = next(iter(spec.values()), None) if isinstance(spec, Mapping) else None
        where = (*path, "model", plan.model.name, "vocab_size")
        if isinstance(arguments, Mapping) and "vocab_size" in arguments:
            checker.add(where, message, arguments, "vocab_size")
        else:
            checker.add(where, message, spec, plan.model.name, of_key=True)
        return
