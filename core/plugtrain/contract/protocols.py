"""What plugtrain requires of each kind of component: the other half of the plugin contract.

:mod:`plugtrain.hookspecs` says how a plugin *registers* components; this module says what a
registered component must *be* so that the Trainer, the built-in wrappers (``SequentialLR``,
``ChainedLR``, ``ScalePerParamLR`` ...) and ``plugtrain plot`` can use it. Nothing here is
private to plugtrain's own plugins: a built-in component meets these protocols exactly as a third
party's does, and the core only ever calls what is written here.

The protocols are :class:`typing.Protocol` classes, checkable at run time with ``isinstance``
where that is meaningful (``runtime_checkable``: the check looks at attribute names, not types).
This module does not import torch; tensor types appear in annotations only.

The components a run is built of are written below; what runs at points of ``fit``,
:class:`Callback` and :class:`Logger` with the order of the callback hooks
(:data:`CALLBACK_HOOKS`, :data:`REVERSED_HOOKS`) and what they may read of the trainer
(:class:`TrainerView`), is written in ``_callback_protocols.py`` beside this file. All of them
are imported from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from plugtrain.contract._callback_protocols import (
    CALLBACK_HOOKS,
    REVERSED_HOOKS,
    BackendView,
    Callback,
    CheckpointFolder,
    CheckpointSettingsView,
    Logger,
    LoggingSettingsView,
    LoopSettingsView,
    PrecisionView,
    SparseParameterView,
    SparsityGroupView,
    SparsityView,
    TrainerView,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CALLBACK_HOOKS",
    "REVERSED_HOOKS",
    "Backend",
    "BackendView",
    "Callback",
    "CheckpointFolder",
    "CheckpointSettingsView",
    "Curve",
    "CurveSchema",
    "DataLoader",
    "Logger",
    "LoggingSettingsView",
    "LoopSettingsView",
    "Model",
    "Optimizer",
    "PrecisionView",
    "Scheduler",
    "SparseParameterView",
    "SparsityAlgorithm",
    "SparsityGroupView",
    "SparsityView",
    "TrainerView",
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

    **Evaluation contract** (plugin API 1.1). An optimizer whose parameters during training are
    not the weights to evaluate (Schedule-Free, averaging optimizers) defines two optional
    methods, ``train()`` and ``eval()`` (both, or the Trainer calls neither), as Meta's
    ``schedulefree`` optimizers do. The Trainer calls ``eval()`` before every evaluation
    (``fit``'s, ``validate``, ``validate_all``, ``Trainer.evaluate``) and before a checkpoint is
    written (so checkpoints hold the evaluation weights), and ``train()`` after each of them and
    at the start of ``fit`` (after a checkpoint was restored, before ``on_fit_start``). Each
    must be idempotent (``eval()`` twice is one ``eval()``) and the mode must be part of
    ``state_dict()``: a checkpoint is saved in ``eval()`` mode and training resumes through
    ``train()``. After ``fit`` the optimizer is back in ``train()`` mode (the model holds the
    training weights, the last checkpoint the evaluation weights): call
    ``trainer.optimizer.eval()`` to use the model itself. ``plugtrain.testing.check_optimizer``
    checks both.

    Sharded parameters (``data_parallel: fsdp2`` or ``hsdp``): the parameters, gradients and
    any state made like them are DTensors holding this process's shard. An optimizer that steps
    them correctly says so with ``supports_sharded_params: ClassVar[bool] = True`` on its
    argument schema (the registry reads it without importing torch); ``plugtrain check``
    refuses any other under FSDP2, with its position and the installed optimizers that would
    run. An element-wise update (each element depends on the same element of the parameter,
    gradient and state only) may simply run on the local shards (``DTensor.to_local()``); one
    that needs a norm per tensor or a matrix's shape must reduce across shards or not declare it.
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
    - ``param_group_tags``: the tags it was given (the rules of :mod:`plugtrain.tags`);
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

    The Trainer, ``plugtrain fit`` and its launcher call exactly these members, and nothing else,
    on every backend, built-in or not; a backend that lacks one is refused when a Trainer is
    created, naming what is missing. :class:`plugtrain.backend_base.BackendBase` implements them
    all for one process on one device (derive from it and override what differs). The
    constructor validates its arguments and then claims its type with
    :func:`plugtrain.backend_base.claim_backend_type` (one backend type per process).

    The order of calls in a Trainer: ``check_runnable()``, ``device``, ``prepare_model(model)``
    at construction; ``is_main_process`` wherever files are written; ``prepare_dataloader`` at
    the start of ``fit``; ``prepare_eval_dataloader`` and ``reduce_sums`` at each evaluation;
    ``close()`` once after the last trainer of a run file.

    One optional member, called only when the backend has it: ``configure_precision(settings)``
    right after ``device``, when the Trainer has precision settings (a
    :class:`plugtrain.config.precision.PrecisionSettings`), so that a backend with its own
    compiler can take ``fp16_type`` and ``precision_opt_level`` (``CSX`` does). Autocast, loss
    scaling and clipping stay in the Trainer. :class:`~plugtrain.backend_base.BackendBase`'s
    default says once that ``precision_opt_level`` has no effect.

    Optional: ``apply_flags(flags) -> dict`` sets Cerebras ``csx.*`` flags and returns their
    previous values (``None``: unset), as :meth:`plugtrain.backend_base.BackendBase.apply_flags`
    documents; the ``GlobalFlags`` and scoped flag callbacks call it, and report the flags as
    inactive on a backend without it.

    Optional: ``parallel_strategy() -> plugtrain.strategy.ParallelStrategy``, how the model runs
    over the processes (wrapping, one gradient synchronisation per optimizer step, metric
    reduction, which process writes); without it the Trainer uses the default strategy built
    on the members above. What a backend needs to know about the processes ``plugtrain fit``
    launches is in :mod:`plugtrain.launching`.

    Optional (since plugin API 1.1): ``peak_flops(dtype) -> float | None``, the device's peak
    FLOP/s in ``dtype``, the denominator of the ``Throughput`` callback's MFU (without it, a
    table of known GPUs, or a matmul probe on a CPU:
    :mod:`plugtrain.train.observability.peak_flops`).

    Optional flags, read as ``False`` when absent: ``compiles_precision`` (the backend's own
    compiler applies the precision settings, so the Trainer does not autocast; ``CSX``) and
    ``cluster_logging`` (it acts on ``logging.wsc_log_level`` and
    ``logging.enable_act_frequency``; ``CSX``).
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
        """Raise :class:`plugtrain.errors.BackendError` before any work if the run cannot start.

        A data-parallel backend joins its process group here.
        """

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model placed on the device (and wrapped, e.g. in DDP) for training.

        The Trainer keeps the unwrapped model (``.module`` when there is one) for evaluation and
        checkpoints.
        """

    def prepare_dataloader(self, loader: Iterable[Any]) -> Iterable[Any]:
        """The share of the training batches that this process trains on."""

    def prepare_eval_dataloader(self, loader: Iterable[Any], max_batches: int | None) -> Any:
        """The share of this process of the first ``max_batches`` evaluation batches.

        ``None``: every batch. The Trainer evaluates everything this returns.
        """

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Each value summed over every process (a copy on one process)."""

    def close(self) -> None:
        """Release what the backend holds (process groups ...); called once at the end."""

    @classmethod
    def processes_per_node(cls, arguments: Mapping[str, Any]) -> int:
        """How many processes ``plugtrain fit`` starts on this machine (with torchrun).

        Called on the class, before any backend exists, with the arguments as written in the
        run file (without ``backend_type``). ``1``: the run stays in the calling process.
        """


# -------------------------------------------------------------------------------------------
# what a run needs besides the above


@runtime_checkable
class Model(Protocol):
    """A model: a :class:`torch.nn.Module` built as ``Model(**arguments)``.

    What the Trainer does with it, at each step (the batch and loss contract; the code is
    :mod:`plugtrain.train.loop.batches`):

    - a batch may be anything the data loader yields. It is moved to the backend's device when
      that is not the CPU, whatever its shape: tensors inside lists, tuples (named ones too),
      mappings and dataclasses, and any object with a ``to(device)`` method;
    - a list or tuple of exactly two items is ``(inputs, targets)``: ``outputs = model(inputs)``
      (``forward`` receives ``inputs`` as its one positional argument, whatever it is);
    - any other batch (a mapping such as ``{"input_ids", "labels"}``, a dataclass, any object)
      is given whole: ``model(batch)``. This is Model Zoo's call: the batch stays one value, so
      a model's ``forward`` has one signature for every batch shape, and batches need not be
      mappings. Hugging Face's call ``model(**batch)`` is reachable: a model whose class sets
      ``batch_as_kwargs = True`` gets a mapping batch unpacked into keyword arguments;
    - the model's result may be: a scalar loss tensor; a mapping holding ``"loss"`` (a scalar
      tensor), where every other scalar entry (a number or a one-element tensor) is a metric,
      logged in training and evaluation like the loss, and the optional integer
      ``"num_examples"`` says how many examples (or tokens) the loss averages over (default:
      the batch size, the first dimension of the batch's first tensor); non-scalar entries
      (logits ...) are ignored; or outputs, which the Trainer scores with its
      ``loss_fn(outputs, targets)`` against the pair's targets or a mapping batch's
      ``"labels"``: by default cross-entropy when the targets are integer class labels and
      ``outputs`` has one more dimension (then accuracy is reported as well), mean squared
      error otherwise; ``Trainer(loss_fn=...)`` replaces it;
    - averages: evaluation weights each batch's loss and metrics by its count
      (``num_examples``, else the batch size) and sums over data-parallel processes, so the
      result is the mean over every example of the evaluation data. Training logs, every
      ``log_steps``, the mean over the window's steps of each step's loss (a step's loss is the
      mean over its ``grad_accum_steps`` micro-batches, the loss whose gradient is taken) and
      count-weighted means of accuracy and the model's metrics, summed over every process.
      With micro-batches and processes of equal counts (``drop_last``) these equal one
      process taking the combined batch; the gradient weights micro-batches equally whatever
      their counts;
    - a model whose class sets ``report_perplexity = True`` (its loss is a mean negative
      log-likelihood) also gets ``perplexity = exp(loss)`` in evaluation metrics;
    - a model with a ``metrics_wanted`` attribute may skip its metrics (keeping the loss):
      the Trainer sets it to ``False`` around the forward of a training step whose metrics are
      not logged, and restores the model's own value after; evaluation always wants them;
    - the optimizer gets the model's named parameters in param groups: the ``params:`` tagging
      filters make tagged groups, and unless ``exclude_from_weight_decay: false`` each group's
      biases (names ending in ``bias``) and normalisation parameters (of a module whose class
      name contains ``Norm``, or 0-D/1-D ones of a module whose name contains ``norm``, ``bn``
      or ``ln``) move into a ``weight_decay: 0`` twin group with the same tags;
    - learning-rate factors (Model Zoo's ``adjust_learning_rate``, muP's per-group learning
      rates): two optional members. ``lr_adjustment_groups``, a mapping of group names to a
      glob or globs on the full parameter names, names groups that ``adjust_learning_rate``
      keys may use. ``learning_rate_factors()`` returns a mapping of keys (a group name, a
      glob on the full parameter name, or a part of the name, as ``adjust_learning_rate``
      keys are read) to factors: the model's own factors, applied to every parameter that no
      ``adjust_learning_rate`` key of the run file matches (the run file's entries win). A
      parameter's factor multiplies its group's learning rate (each LR scheduler is wrapped
      so that it applies them); an empty mapping changes nothing;
    - speed (optional, since plugin API 1.1): ``num_tokens(batch) -> int``, the tokens of a
      batch, for the ``Throughput`` callback's tokens/s and MFU (without it, a mapping batch's
      ``input_ids`` tensor counts its elements; a model whose batches hold no tokens gets no
      ``Throughput`` record unless the callback is listed); ``repeated_blocks()`` (or an
      attribute of that name) returning the repeated modules (a decoder's layers), which
      ``compile: regional`` compiles and ``activation_checkpointing`` wraps one by one (without
      it, the items of every ``nn.ModuleList`` of two or more modules of one class);
    - sharding (optional, since plugin API 1.1): ``fsdp_modules``, globs of the submodules that
      get their own FSDP2 unit when the backend names none; ``init_weights()``, which gives
      every parameter and buffer the value construction gives it, drawing random numbers in
      the same order: then FSDP2 builds the model on the ``meta`` device and fills only each
      process's shards by calling it (``docs/sharded.md``).

    Checkpoints hold ``state_dict()`` of the unwrapped model.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The forward pass: ``model(inputs)``, ``model(batch)`` or ``model(**batch)``."""

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The trainable tensors."""

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]:
        """The trainable tensors with their dotted names (parameter tagging matches these)."""

    def state_dict(self) -> dict[str, Any]:
        """The weights."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Restore the weights."""

    def train(self, mode: bool = True) -> Any:
        """Switch training behaviour (dropout, batch norm) on or off."""

    def eval(self) -> Any:
        """Switch to evaluation behaviour."""


@runtime_checkable
class DataLoader(Protocol):
    """A data loader: built as ``factory(**arguments)``, an iterable of batches.

    A batch is an ``(inputs, targets)`` pair, a mapping or any object (see :class:`Model` for
    how each reaches the model).

    Each pass of ``iter()`` is one epoch. A ``len()`` (batches per epoch) is needed for
    ``loop.num_epochs``. A ``torch.utils.data.DataLoader`` over a map-style dataset with a
    ``batch_size`` follows the global sample order (``loop.sample_order``: the same samples per
    optimizer step at any number of processes; a resume continues at its global sample
    position, at any world size, without loading a batch). Any other loader resumes exactly by
    replaying the batches of an interrupted epoch, so iterating must be deterministic once the
    global RNGs are seeded, unless it is stateful: optional ``state_dict()`` (plain values and
    tensors) and ``load_state_dict(state)`` members (Model Zoo's restartable loaders have this
    shape) are saved with each checkpoint's data position, and on resume ``load_state_dict`` is
    called before the next ``iter()``, which must continue where the state was taken; nothing
    is replayed. A data-parallel backend shards a map-style ``DataLoader`` (or one that already
    has a ``DistributedSampler``); other iterables run on one process.
    """

    def __iter__(self) -> Iterator[Any]:
        """The batches of one epoch."""


# -------------------------------------------------------------------------------------------
# weight sparsity


@runtime_checkable
class SparsityAlgorithm(Protocol):
    """A weight-sparsity algorithm (``trainer.init.sparsity``): it decides masks, nothing else.

    Built as ``Algorithm(params, **arguments)``: ``params`` is the list of ``(name, parameter)``
    pairs of its group (full dotted names; the parameters the group's ``param_filter`` selected
    and no earlier group took), ``arguments`` are the group's keys other than ``algorithm`` and
    ``param_filter``, as written (``sparsity`` may be a number, a list or a schedule mapping:
    :func:`plugtrain.hyperparams.make_schedule` turns it into a schedule). It may keep the
    parameters to read their values later; it must not change them.

    The core (:mod:`plugtrain.train.loop.sparsity`) does the rest, for every algorithm alike: it
    keeps each mask as a persistent bool buffer ``<name>_mask`` on the parameter's module,
    zeroes the weights where masked before every forward, the gradients in backward and the
    optimizer's state tensors of the parameter's shape around each optimizer step, saves and
    restores masks (in the model state) and :meth:`state_dict` (checkpoint key ``sparsity``),
    and makes random choices agree on every process by handing over one seeded
    ``generator``, and summed gradients.

    The calls, in order:

    - ``initial_masks(generator)`` once, at the start of the first ``fit`` or ``validate``
      (after a checkpoint was restored), only when the checkpoint brought no masks;
    - after every training step, ``advance(stepped)``; when it returns true,
      ``update_masks(masks, gradients, generator)`` right after. ``stepped`` is false when the
      optimizer did not apply the step (the loss scaler skipped it, ``nan_policy:
      skip_step``): the step still counts, but an algorithm should not update then.

    Masks are bool tensors of the parameter's shape, true where the weight is kept; one
    returned for a parameter of another group or of another shape is an error naming the
    algorithm. Optional: ``needs_gradients = True`` (class attribute) to be given the unmasked
    gradients (summed over micro-batches and over processes) at an update step, and
    ``target_sparsity()`` for ``LogSparsity``.
    """

    def initial_masks(self, generator: torch.Generator) -> Mapping[str, torch.Tensor]:
        """The first mask of each parameter of the group, by name (``init_method``).

        :param generator: use it (``torch.rand(..., generator=generator)``) for anything random.
        """

    def advance(self, stepped: bool) -> bool:
        """Count one finished training step; whether the masks are to be updated now."""

    def update_masks(
        self,
        masks: Mapping[str, torch.Tensor],
        gradients: Mapping[str, torch.Tensor] | None,
        generator: torch.Generator,
    ) -> Mapping[str, torch.Tensor]:
        """New masks (for the parameters whose mask changes) at an update step.

        :param masks: the current masks by name (copies: modifying them changes nothing).
        :param gradients: with ``needs_gradients``, the unmasked gradients by name; else
            ``None``.
        :param generator: for anything random.
        """

    def target_sparsity(self) -> float:
        """The fraction of zeros the algorithm aims at now (the clamped schedule value)."""

    def state_dict(self) -> dict[str, Any]:
        """What it needs to continue exactly (step, schedule positions); ``{}`` when nothing.

        Saved in checkpoints: it must load with ``torch.load(..., weights_only=True)``.
        """

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
