"""The plan of a run: a run file validated once, as typed, immutable values (torch-free).

:func:`plugtrain.config.plan_run` turns a loaded run file into a :class:`RunPlan`; ``fit``,
``validate``, ``check``, ``plot``, the launcher and the Trainer builder all read the plan and never
the file's mappings again. Every value in a plan is plain Python (``dict``, ``list``, ``str``,
numbers...): the YAML loader's positioned containers stop at validation, so nothing they carry
reaches a component, a param group or a checkpoint. Where a value was written is kept beside it
(``path`` and ``location``) for messages.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.sections import CheckpointSettings, LoggingSettings, LoopSettings
from plugtrain.config.speed import ProfileSettings
from plugtrain.errors import ConfigIssue

__all__ = [
    "BackendPlan",
    "ComponentSpec",
    "FitPlan",
    "OptimizerPlan",
    "ParamFilter",
    "RemovedDefault",
    "RunPlan",
    "SparsityGroupSpec",
    "TrainerPlan",
    "ValidateAllPlan",
    "ValidatePlan",
    "plain",
]


def plain(value: Any) -> Any:
    """A deep copy of ``value`` made of plain ``dict``, ``list`` and ``tuple`` containers.

    Mappings become ``dict`` (positioned ``LocatedDict`` and read-only views included) and lists
    become ``list``; a :class:`ComponentSpec` becomes its ``{Name: {arguments}}`` mapping.
    """
    if isinstance(value, ComponentSpec | RemovedDefault):
        return value.to_mapping()
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class ComponentSpec:
    """One validated component, ``{Name: {arguments}}`` of a run file.

    :param kind: ``"optimizer"``, ``"scheduler"``, ``"model"``, ``"dataloader"`` ...
    :param name: the name as written (possibly an alias or ``distribution:Name``); the registry
        that validated it resolves it to the same component.
    :param arguments: the arguments as written, plain values; a nested component (a child of
        ``SequentialLR``) is itself a :class:`ComponentSpec`, a list of them a ``list``.
    :param path: the dotted path in the run file (``trainer.init.schedulers[0]``).
    :param location: ``file:line:column`` of the component, when read from a file.
    """

    kind: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(converter=_frozen_mapping, hash=False)
    path: str = ""
    location: str | None = attrs.field(default=None, eq=False)

    def call_arguments(self) -> dict[str, Any]:
        """A fresh, mutable copy of the arguments for a constructor (nested specs kept)."""
        return {key: _copy_keeping_specs(value) for key, value in self.arguments.items()}

    def to_mapping(self) -> dict[str, Any]:
        """``{name: {arguments}}`` in plain values, nested components included."""
        return {self.name: plain(dict(self.arguments))}

    @property
    def where(self) -> str:
        """The path and, when known, the position: ``trainer.init.model (run.yaml:6:7)``."""
        return f"{self.path} ({self.location})" if self.location else self.path


def _copy_keeping_specs(value: Any) -> Any:
    if isinstance(value, ComponentSpec):
        return value
    if isinstance(value, list):
        return [_copy_keeping_specs(v) for v in value]
    return copy.deepcopy(value)


@attrs.frozen
class RemovedDefault:
    """A ``Name: null`` entry of ``callbacks:`` or ``loggers:``: that default one is not used.

    :param kind: ``"callback"`` or ``"logger"``.
    :param name: the default's registered name (``"ProgressLogger"``).
    :param path: the dotted path in the run file (``trainer.init.loggers[0]``).
    :param location: ``file:line:column``, when read from a file.
    """

    kind: str
    name: str
    path: str = ""
    location: str | None = attrs.field(default=None, eq=False)

    def to_mapping(self) -> dict[str, Any]:
        """``{name: None}``, as the Trainer takes it."""
        return {self.name: None}


@attrs.frozen
class BackendPlan:
    """Where the trainer runs.

    :param backend_type: the registered backend name (``"CPU"``), whatever case was written.
    :param arguments: the backend's arguments as written (without ``backend_type``), plain.
    :param path: ``trainer.init.device`` or ``trainer.init.backend``.
    :param location: ``file:line:column``, when read from a file.
    """

    backend_type: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, hash=False)
    path: str = ""
    location: str | None = attrs.field(default=None, eq=False)

    def call_arguments(self) -> dict[str, Any]:
        """A fresh, mutable copy of the arguments for the backend's constructor."""
        return plain(dict(self.arguments))  # type: ignore[no-any-return]


@attrs.frozen
class ParamFilter:
    """One parameter-tagging filter of an optimizer: ``{params: GLOB or [GLOB...], tag: NAME}``.

    :param globs: the globs matched against parameter names.
    :param tag: the tag given to matching parameters.
    """

    globs: tuple[str, ...]
    tag: str

    def to_mapping(self) -> dict[str, Any]:
        """The filter as :func:`plugtrain.bases.param_groups.build_param_groups` takes it."""
        return {"params": list(self.globs), "tag": self.tag}


@attrs.frozen
class OptimizerPlan:
    """The optimizer and how the Trainer groups the model's parameters for it.

    :param spec: the optimizer, without the two keys the Trainer handles.
    :param param_filters: the ``params:`` tagging filters (``None``: none written).
    :param exclude_from_weight_decay: put bias and normalisation parameters in
        ``weight_decay: 0`` groups.
    :param adjust_learning_rate: ``(name pattern, factor)`` pairs: per-layer learning-rate
        multipliers put on the param groups (Model Zoo's ``adjust_learning_rate``).
    """

    spec: ComponentSpec
    param_filters: tuple[ParamFilter, ...] | None = None
    exclude_from_weight_decay: bool = True
    adjust_learning_rate: tuple[tuple[str, float], ...] = ()


@attrs.frozen
class SparsityGroupSpec:
    """One validated group of ``trainer.init.sparsity``.

    :param algorithm: the registered name of its sparsity algorithm (``"RigL"``), whatever case
        was written.
    :param arguments: the algorithm's constructor arguments as written, plain values (the
        ``schedule`` alias renamed to ``sparsity``; schedules as written: a number, a list or a
        mapping; from Python also callables and built schedules).
    :param param_filter: the globs choosing its parameters (matched against full names with
        ``fnmatch``), a callable ``(name, param) -> bool`` from Python, or ``None`` for the
        default filter.
    :param path: the dotted path in the run file (``trainer.init.sparsity[1]``).
    :param location: ``file:line:column`` of the group, when read from a file.
    """

    algorithm: str
    arguments: Mapping[str, Any] = attrs.field(converter=_frozen_mapping, hash=False)
    param_filter: tuple[str, ...] | Callable[[str, Any], bool] | None = None
    path: str = ""
    location: str | None = attrs.field(default=None, eq=False)

    def call_arguments(self) -> dict[str, Any]:
        """A fresh, mutable copy of the arguments for the algorithm's constructor."""
        return {key: _copy_keeping_callables(value) for key, value in self.arguments.items()}

    @property
    def where(self) -> str:
        """The path and, when known, the position: ``trainer.init.sparsity (run.yaml:9:7)``."""
        return f"{self.path} ({self.location})" if self.location else self.path


def _copy_keeping_callables(value: Any) -> Any:
    if callable(value):
        return value
    if isinstance(value, Mapping):
        return {k: _copy_keeping_callables(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_keeping_callables(v) for v in value]
    return copy.deepcopy(value)


@attrs.frozen
class FitPlan:
    """``trainer.fit``.

    :param train_dataloader: the training data.
    :param val_dataloader: the evaluation data, if any.
    :param ckpt_path: the checkpoint to start from (``None``: none).
    :param ckpt_path_given: whether ``ckpt_path`` was written; unset means the newest
        checkpoint in ``model_dir`` when autoloading is on.
    """

    train_dataloader: ComponentSpec
    val_dataloader: ComponentSpec | None = None
    ckpt_path: str | None = None
    ckpt_path_given: bool = False


@attrs.frozen
class ValidatePlan:
    """``trainer.validate`` (or, for ``plugtrain validate``, the fit section's evaluation data).

    :param val_dataloader: the evaluation data.
    :param ckpt_path: the checkpoint to evaluate (``None``: none).
    :param ckpt_path_given: whether ``ckpt_path`` was written.
    """

    val_dataloader: ComponentSpec
    ckpt_path: str | None = None
    ckpt_path_given: bool = False


@attrs.frozen
class ValidateAllPlan:
    """``trainer.validate_all``.

    :param val_dataloaders: the evaluation data sets, in order (none: the callbacks alone
        evaluate each checkpoint).
    :param ckpt_paths: the checkpoints (paths or globs) as written; ``None``: the model as it
        is.
    :param ckpt_paths_given: whether ``ckpt_paths`` was written; unset means every checkpoint
        in ``model_dir``, in step order.
    """

    val_dataloaders: tuple[ComponentSpec, ...]
    ckpt_paths: tuple[str, ...] | None = None
    ckpt_paths_given: bool = False


@attrs.frozen
class TrainerPlan:
    """One validated trainer of a run file.

    :param path: where it is in the file (``trainer`` or ``trainer[1].trainer``).
    :param backend: where it runs.
    :param model: the model.
    :param optimizer: the optimizer and parameter tagging (``None``: no optimizer).
    :param schedulers: the schedulers, in order.
    :param model_dir: where checkpoints, metrics and plots go.
    :param seed: the seed of Python, numpy and torch, if any.
    :param loop: loop settings, if given.
    :param checkpoint: checkpoint settings, if given.
    :param logging: logging settings, if given.
    :param precision: mixed precision and gradient clipping settings, if given.
    :param callbacks: the callbacks in order, and the removed defaults (``Name: null``).
    :param loggers: the loggers written besides the defaults, and the removed defaults.
    :param sparsity: the weight-sparsity groups in order (empty: no sparsity).
    :param compile: ``off``, ``regional`` or ``full``.
    :param activation_checkpointing: ``off``, ``full`` or ``selective``.
    :param profile: the profiler window, if given.
    :param fit: the fit section, if any.
    :param validate: the validate section, if any.
    :param validate_all: the validate_all section, if any.
    :param config: the ``init`` mapping as written, plain (stored in checkpoints' metadata).
    """

    path: str
    backend: BackendPlan
    model: ComponentSpec
    optimizer: OptimizerPlan | None = None
    schedulers: tuple[ComponentSpec, ...] = ()
    model_dir: str = "./model_dir"
    seed: int | None = None
    loop: LoopSettings | None = None
    checkpoint: CheckpointSettings | None = None
    logging: LoggingSettings | None = None
    precision: PrecisionSettings | None = None
    callbacks: tuple[ComponentSpec | RemovedDefault, ...] = ()
    loggers: tuple[ComponentSpec | RemovedDefault, ...] = ()
    sparsity: tuple[SparsityGroupSpec, ...] = ()
    compile: str = "off"
    activation_checkpointing: str = "off"
    profile: ProfileSettings | None = None
    fit: FitPlan | None = None
    validate: ValidatePlan | None = None
    validate_all: ValidateAllPlan | None = None
    config: Mapping[str, Any] = attrs.field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )

    @property
    def backend_type(self) -> str:
        """The registered backend type it asks for (``"CPU"``)."""
        return self.backend.backend_type

    @property
    def steps(self) -> tuple[str, ...]:
        """What it does, in order: ``("fit", "validate")``, ``("validate_all",)`` ..."""
        names = ("fit", "validate", "validate_all")
        return tuple(name for name in names if getattr(self, name) is not None)


@attrs.frozen
class RunPlan:
    """A whole run file, validated: its trainers in order and the plugin modules it names.

    :param source: the file it was read from (for messages).
    :param trainers: one plan per trainer.
    :param plugins: the run file's ``plugins:`` (local plugin modules).
    :param warnings: what was accepted but deserves a word (a key that has no effect here,
        a default taken from Model Zoo), each with its path and position.
    """

    source: str
    trainers: tuple[TrainerPlan, ...]
    plugins: tuple[str, ...] = ()
    warnings: tuple[ConfigIssue, ...] = attrs.field(default=(), eq=False)

    def __iter__(self) -> Iterator[TrainerPlan]:
        return iter(self.trainers)

    def __len__(self) -> int:
        return len(self.trainers)
