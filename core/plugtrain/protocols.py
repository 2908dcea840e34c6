"""What plugtrain requires of each kind of component: the other half of the plugin contract.

:mod:`plugtrain.hookspecs` says how a plugin *registers* components; this module says what a
registered component must *be* so that the Trainer, the built-in wrappers (``SequentialLR``,
``ChainedLR``, ``ScalePerParamLR`` ...) and ``plugtrain plot`` can use it. Nothing here is
private to plugtrain's own plugins: a built-in component meets these protocols exactly as a third
party's does, and the core only ever calls what is written here.

The protocols are :class:`typing.Protocol` classes, checkable at run time with ``isinstance``
where that is meaningful (``runtime_checkable``: the check looks at attribute names, not types).
This module does not import torch; tensor types appear in annotations only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

__all__ = [
    "Backend",
    "Callback",
    "Curve",
    "CurveSchema",
    "DataLoader",
    "Logger",
    "Model",
    "Optimizer",
    "Scheduler",
]


# -------------------------------------------------------------------------------------------
# optimizers


@runtime_checkable
class Optimizer(Protocol):
    """An optimizer: in practice a :class:`torch.optim.Optimizer` subclass, which the core checks.

    Built as ``Optimizer(params, **arguments)`` where ``params`` is an iterable of tensors, of
    ``(name, tensor)`` pairs, or of param-group dicts. Schedulers read and write the groups'
    ``"lr"`` and ``"weight_decay"`` and read their ``"tags"``; ``state_dict()`` must load with
    ``torch.load(..., weights_only=True)`` (plain containers, numbers, strings and tensors).
    """

    param_groups: list[dict[str, Any]]
    state: Any

    def step(self, closure: Any = None) -> Any:
        """Apply one update from the gradients; return the closure's loss when one is given."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly."""

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


# -------------------------------------------------------------------------------------------
# schedulers


@runtime_checkable
class Curve(Protocol):
    """A closed-form schedule: the value as a pure function of the step, no torch needed.

    ``plugtrain plot`` and ``plugtrain check`` evaluate curves without building an optimizer;
    wrappers evaluate a child's curve at their own step instead of stepping it; ``SequentialLR``
    uses ``length`` as a child's share of the steps when milestones are omitted.
    :class:`plugtrain.curve.Curve` is a ready implementation.
    """

    length: int | None
    """The schedule's natural number of steps (its ``total_iters``); ``None`` when it has none."""

    def at(self, step: int) -> float:
        """The value after ``step`` calls of ``step()`` (``at(0)`` is the value at construction).

        A pure function: plot and the wrappers call it for any step, in any order.
        """


class CurveSchema(Protocol):
    """A scheduler's argument schema that also knows its closed form (optional for a scheduler).

    A schema class (see :mod:`plugtrain.schema`; :class:`plugtrain.scheduler.ScheduleSchema` is
    a ready base) with these class attributes lets ``plugtrain plot`` draw the schedule
    torch-free and ``plugtrain check`` test how it nests; without ``curve`` (or when it raises
    :class:`NotImplementedError`) plot steps the real scheduler on a throw-away optimizer.
    """

    schedule_key: ClassVar[str]
    """``"lr"`` or ``"weight_decay"``: the param-group key the scheduler writes."""

    nestable: ClassVar[bool]
    """Optional (default true): false for a scheduler that can only be outermost."""

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: Any) -> Curve:
        """The curve for validated ``arguments`` (aliases renamed, defaults filled in).

        :param child_curve: turns a nested scheduler argument into its curve; it raises
            :class:`NotImplementedError` for a child without one.
        :raises NotImplementedError: the schedule has no closed form.
        :raises ValueError: the arguments cannot work together (check reports the message).
        """


@runtime_checkable
class Scheduler(Protocol):
    """A learning-rate or weight-decay scheduler, built as ``Scheduler(optimizer, **arguments)``.

    Construction writes the value of step 0 into the targeted groups at once; each ``step()``
    writes the next. The members below are required; :class:`plugtrain.scheduler.Scheduler` is a
    base that provides all of them from a schema with a closed form. Besides, the core reads
    these optional members through :mod:`plugtrain.scheduler`'s readers, with the defaults that
    make a plain ``torch.optim.lr_scheduler.LRScheduler`` a scheduler too:

    - ``param_key: str``: ``"lr"`` or ``"weight_decay"`` (default ``"lr"``);
    - ``group_indices: Sequence[int]``: the indices in ``optimizer.param_groups`` of the groups
      it writes (default: the groups its ``param_group_tags`` select, else every group);
    - ``param_group_tags``: the tags it was given (SPEC section 5; :mod:`plugtrain.tags`);
      wrappers push theirs down and refuse a child asking for others;
    - ``length: int | None``: its natural number of steps, from which ``SequentialLR`` defaults
      its milestones (default: its curve's length, else none);
    - ``curve``: a :class:`Curve`; a wrapper then evaluates it instead of stepping the child.

    The Trainer rejects two schedulers of one ``param_key`` writing one group. A wrapper steps a
    child without a curve itself, showing it only its own past values and restoring every other
    group, so a child that writes every group is fine.
    """

    optimizer: Any
    """The optimizer whose groups it writes."""

    def step(self) -> None:
        """Advance one step and write the new value into the targeted groups."""

    def state_dict(self) -> dict[str, Any]:
        """The state to continue the same curve exactly.

        It goes into checkpoints, so it must load with ``torch.load(..., weights_only=True)``:
        tensors, numbers, strings, ``None`` and lists, tuples and dicts of them. The Trainer
        checks this at the first save and names the scheduler when it does not.
        """

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned and write the restored values at once."""

    def get_last_lr(self) -> list[Any]:
        """The values last written, one per targeted group (torch's name, also for WD)."""


# -------------------------------------------------------------------------------------------
# backends


@runtime_checkable
class Backend(Protocol):
    """Where and how a run executes (``CPU``, ``GPU``, ``CSX``), built as ``Backend(**arguments)``.

    The constructor claims its type with :func:`plugtrain.train.backends.claim_backend_type`
    (one backend type per process). The Trainer calls exactly these members.
    """

    backend_type: str
    """The registered name: ``"CPU"``, ``"GPU"``, ``"CSX"`` ..."""

    @property
    def device(self) -> torch.device:
        """The device that models and batches are moved to."""

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints, metrics and logs (rank 0)."""

    def check_runnable(self) -> None:
        """Raise :class:`plugtrain.errors.BackendError` before any work if the run cannot start."""

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model placed on the device (and wrapped, e.g. in DDP) for training."""

    def prepare_dataloader(self, loader: Iterable[Any]) -> Iterable[Any]:
        """The share of the training batches that this process trains on."""

    def prepare_eval_dataloader(self, loader: Iterable[Any], max_batches: int | None) -> Any:
        """The share of the first ``max_batches`` evaluation batches for this process."""

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Sums over every process (the identity on one process)."""

    def close(self) -> None:
        """Release what the backend holds (process groups ...); called once at the end."""


# -------------------------------------------------------------------------------------------
# what a run needs besides the above


@runtime_checkable
class Model(Protocol):
    """A model: a :class:`torch.nn.Module` built as ``Model(**arguments)``.

    For a batch ``(inputs, targets)`` the Trainer calls ``model(inputs)`` and scores the outputs
    with its loss function (cross-entropy for integer class labels, mean squared error
    otherwise). Bias and normalisation-layer parameters go into ``weight_decay: 0`` groups unless
    the optimizer section switches that off.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The forward pass."""

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable tensors."""

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        """The trainable tensors with their dotted names (parameter tagging matches these)."""

    def state_dict(self) -> dict[str, Any]:
        """The weights."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Restore the weights."""


@runtime_checkable
class DataLoader(Protocol):
    """A data loader: built as ``factory(**arguments)``, an iterable of batches.

    Each pass of ``iter()`` is one epoch. A ``len()`` (batches per epoch) is needed for
    ``loop.num_epochs``. Exact resume replays the batches of an interrupted epoch, so iterating
    must be deterministic once the global RNGs are seeded.
    """

    def __iter__(self) -> Iterator[Any]:
        """The batches of one epoch."""


@runtime_checkable
class Callback(Protocol):
    """Code that runs at points of ``fit`` and ``validate``; every method is optional.

    The Trainer calls only the methods a callback defines: ``on_fit_start(trainer)``,
    ``on_train_step_end(trainer, metrics)``, ``on_validate_end(trainer, metrics)``,
    ``on_fit_end(trainer)``. Any object satisfies ``isinstance(obj, Callback)``.
    """


@runtime_checkable
class Logger(Protocol):
    """Where metrics go (files, TensorBoard ...): called on the main process only."""

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` of ``split`` (``"train"`` or ``"val"``) at ``step``."""

    def close(self) -> None:
        """Flush and release files; called once at the end of ``fit`` or ``validate``."""
