"""The batch and loss contract: how the Trainer calls a model on a batch and reads its loss.

The rules (stated for plugin authors in :class:`plugtrain.protocols.Model`):

- a list or tuple of exactly two items is ``(inputs, targets)``: ``outputs = model(inputs)``,
  scored by the Trainer's ``loss_fn(outputs, targets)`` (unless the model returns its own loss);
- any other batch (a mapping, a dataclass, any object) is given to the model whole, as its one
  positional argument: ``model(batch)`` (Model Zoo's call); a model whose class sets
  ``batch_as_kwargs = True`` is called ``model(**batch)`` for a mapping batch instead (Hugging
  Face's call);
- the model may return a scalar loss, a mapping holding ``"loss"`` (its other scalar entries are
  metrics, logged like the loss; an integer ``"num_examples"`` says how many examples or tokens
  the loss averages over), or outputs, which the Trainer scores with ``loss_fn`` against the
  targets of a pair or the ``"labels"`` of a mapping batch.

Averages over examples: each batch's loss and metrics are weighted by its count
(``num_examples``, else the batch size: the first dimension of its first tensor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch

from plugtrain.errors import TrainingError
from plugtrain.train.data import batch_size

__all__ = [
    "MetricSums",
    "Scored",
    "batch_size",
    "default_loss",
    "move_batch",
    "score_batch",
    "token_ids_beyond_embedding",
]

COUNT_KEY = "num_examples"
"""The entry of a model's returned mapping that says how many examples its loss averages over."""

LABELS_KEY = "labels"
"""The entry of a mapping batch that ``loss_fn`` scores a model's outputs against."""


@dataclasses.dataclass
class Scored:
    """What one batch gave: the loss to backpropagate and what the metrics need.

    :ivar loss: the scalar loss tensor.
    :ivar weight: the examples (or tokens) the loss averages over.
    :ivar metrics: extra scalar metrics of the batch (means over its ``weight`` examples).
    :ivar correct: correct class predictions (Trainer-scored class labels only; a tensor on
        the device, read when logged), else 0.
    :ivar count: labels those were counted over, else 0.
    """

    loss: torch.Tensor
    weight: int
    metrics: dict[str, float]
    correct: int | torch.Tensor = 0
    count: int = 0


class MetricSums:
    """Weighted sums of extra metrics over batches, reducible across processes."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}

    def add(self, metrics: Mapping[str, float], weight: float) -> None:
        """Add one batch's metric means, weighted by its count."""
        for name, value in metrics.items():
            self.sums[name] = self.sums.get(name, 0.0) + value * weight
            self.weights[name] = self.weights.get(name, 0.0) + weight

    def merge(self, other: MetricSums) -> None:
        """Add the sums of ``other``."""
        for name, value in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
            self.weights[name] = self.weights.get(name, 0.0) + other.weights[name]

    def totals(self) -> dict[str, float]:
        """The sums as flat entries for :meth:`Backend.reduce_sums`."""
        flat = {f"metric_sum/{name}": value for name, value in self.sums.items()}
        flat.update({f"metric_weight/{name}": value for name, value in self.weights.items()})
        return flat

    @staticmethod
    def means(totals: Mapping[str, float]) -> dict[str, float]:
        """Each metric's weighted mean, from (reduced) :meth:`totals`."""
        means = {}
        for key, value in totals.items():
            if key.startswith("metric_sum/"):
                name = key.removeprefix("metric_sum/")
                weight = totals[f"metric_weight/{name}"]
                means[name] = value / weight if weight else float("nan")
        return means


def default_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The Trainer's ``loss_fn`` unless given: cross-entropy for class labels, else MSE."""
    if targets.dtype in (torch.int64, torch.int32) and outputs.dim() == targets.dim() + 1:
        return torch.nn.functional.cross_entropy(outputs, targets)
    return torch.nn.functional.mse_loss(outputs, targets)


def move_batch(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor on ``device``, whatever its shape.

    Tensors inside lists, tuples (named ones too), mappings and dataclasses move; another
    object with a ``to(device)`` method is moved with it; anything else is left as it is.
    """
    if isinstance(value, torch.Tensor):
        if value.device == device:
            return value
        return value.to(device, non_blocking=True)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(move_batch(v, device) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(move_batch(v, device) for v in value)
    if isinstance(value, Mapping):
        return {k: move_batch(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: move_batch(getattr(value, f.name), device) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **fields)
    to = getattr(value, "to", None)
    return to(device) if callable(to) else value


def _is_pair(batch: Any) -> bool:
    return isinstance(batch, list | tuple) and len(batch) == 2 and not hasattr(batch, "_fields")


def _scalar(value: Any) -> float | None:
    if isinstance(value, torch.Tensor):
        return float(value.detach()) if value.numel() == 1 else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _own_loss(result: Mapping[str, Any], batch: Any, where: str) -> Scored:
    loss = result["loss"]
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        message = f"{where}: the model's 'loss' must be a scalar tensor, got {_describe(loss)}"
        raise TrainingError(message)
    count = result.get(COUNT_KEY)
    weight = int(count) if count is not None else batch_size(batch)
    metrics = {}
    for name, value in result.items():
        if name in ("loss", COUNT_KEY):
            continue
        scalar = _scalar(value)
        if scalar is not None:
            metrics[str(name)] = scalar
    return Scored(loss.reshape(()), weight, metrics)


def _scored_outputs(
    outputs: Any, targets: Any, batch: Any, loss_fn: Callable[[Any, Any], torch.Tensor]
) -> Scored:
    loss = loss_fn(outputs, targets)
    if (
        isinstance(outputs, torch.Tensor)
        and isinstance(targets, torch.Tensor)
        and outputs.dim() == targets.dim() + 1
        and not targets.is_floating_point()
    ):
        correct = (outputs.argmax(dim=-1) == targets).sum()  # read once per logged step
        return Scored(loss, batch_size(batch), {}, correct, targets.numel())
    return Scored(loss, batch_size(batch), {})


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def score_batch(
    model: Any,
    batch: Any,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    autocast: Callable[[], AbstractContextManager[Any]],
    batch_as_kwargs: bool = False,
) -> Scored:
    """Run ``model`` on ``batch`` under ``autocast`` and read the loss (the module's rules).

    :raises TrainingError: the model returned no loss and there is nothing to score it against.
    """
    if _is_pair(batch):
        inputs, targets = batch
        with autocast():
            outputs = model(inputs)
            if isinstance(outputs, Mapping) and "loss" in outputs:
                return _own_loss(outputs, batch, "a batch (inputs, targets)")
            return _scored_outputs(outputs, targets, batch, loss_fn)
    with autocast():
        keywords = batch_as_kwargs and isinstance(batch, Mapping)
        try:
            result = model(**batch) if keywords else model(batch)
        except IndexError as exc:
            problem = token_ids_beyond_embedding(model, batch)
            if problem is None:
                raise
            raise TrainingError(problem) from exc
        if isinstance(result, Mapping) and "loss" in result:
            return _own_loss(result, batch, f"a {type(batch).__name__} batch")
        if isinstance(result, torch.Tensor) and result.dim() == 0:
            return Scored(result, batch_size(batch), {})
        if isinstance(batch, Mapping) and LABELS_KEY in batch:
            return _scored_outputs(result, batch[LABELS_KEY], batch, loss_fn)
    message = (
        f"the model returned {_describe(result)} for a {type(batch).__name__} batch, and the "
        "Trainer has nothing to score it against: a model given a whole batch returns a "
        "scalar loss or a mapping holding 'loss', or the batch is a mapping with 'labels' "
        "(or an (inputs, targets) pair) for the Trainer's loss_fn"
    )
    raise TrainingError(message)


def token_ids_beyond_embedding(model: Any, batch: Any) -> str | None:
    """Why a model's forward raised ``IndexError``, when the batch's token ids explain it.

    The batch's largest ``input_ids`` against the model's largest embedding (its vocabulary):
    a data vocabulary larger than the model's ``vocab_size``. ``None`` when that is not it.
    """
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if not isinstance(ids, torch.Tensor) or ids.numel() == 0 or ids.is_floating_point():
        return None
    sizes = [m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    largest = int(ids.max())
    if not sizes or largest < max(sizes):
        return None
    return (
        f"the batch holds token id {largest} in input_ids, but the model's embedding has "
        f"{max(sizes)} (vocab_size {max(sizes)}: ids 0 to {max(sizes) - 1}): the data's "
        f"vocabulary is larger than the model's; give the model vocab_size at least "
        f"{largest + 1}, or tokenize the data with the model's tokenizer"
    )
