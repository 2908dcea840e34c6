"""Schemas of a run file's own sections (torch-free).

The trainer's ``init``, ``fit`` and ``validate`` mappings and the ``loop``, ``checkpoint`` and
``logging`` settings.

The same classes are the Trainer's runtime settings: ``LoopSettings(max_steps=100)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.speed import ACTIVATION_CHECKPOINTING, COMPILE, ProfileSettings
from plugtrain.registry.schema import Problem, about, arg

__all__ = [
    "CheckpointSettings",
    "FitSection",
    "InitSection",
    "LoggingSettings",
    "LoopSettings",
    "RunFile",
    "TrainerSection",
    "ValidateAllSection",
    "ValidateSection",
]

MUTUALLY_EXCLUSIVE = (
    "backend and device are mutually exclusive arguments of Trainer. "
    "Please only provide one or the other"
)


@attrs.frozen
class LoopSettings:
    """How long to train and how often to evaluate."""

    max_steps: int | None = arg(None, help="stop when the global step reaches this", gt=0)
    num_steps: int | None = arg(None, help="optimizer steps to take in this fit", gt=0)
    num_epochs: int | None = arg(None, help="passes over the training data in this fit", gt=0)
    steps_per_epoch: int | None = arg(
        None,
        help="optimizer steps in one epoch (None: one pass over the training data); an epoch "
        "then starts the data loader again",
        gt=0,
    )
    eval_frequency: int | float | None = arg(
        None,
        help="an int: evaluate every this many steps; a float in (0, 1]: every that fraction "
        "of the fit's steps (0.25: four times); None or 0: only at the end",
        ge=0,
    )
    eval_steps: int | None = arg(None, help="batches per evaluation (None: the whole set)", gt=0)
    grad_accum_steps: int = arg(1, help="batches accumulated into one optimizer step", gt=0)
    loss_averaging: str = arg(
        "global",
        choices=("global", "per_micro_batch"),
        help="how an optimizer step's loss is averaged: global (over every example or token of "
        "the step, across its micro-batches and processes: the gradient of one big batch, "
        "Model Zoo's semantics) or per_micro_batch (the mean of the micro-batches' mean "
        "losses)",
    )
    sample_order: str = arg(
        "global",
        choices=("global", "loader"),
        help="global: one permutation per epoch from (seed, epoch) over the whole dataset, "
        "each optimizer step a fixed slice of it, so the samples per step are the same at any "
        "number of processes and accumulation split (map-style DataLoaders with a batch_size; "
        "others keep their own order); loader: the data loader's own order (sharded by a "
        "DistributedSampler on several processes)",
    )
    nan_policy: str = arg(
        "stop",
        choices=("stop", "skip_step"),
        help="a NaN or infinite loss (or gradients that precision's loss scaling cannot fix): "
        "stop (keep the last good checkpoint) or skip_step (drop that step's update, count the "
        "step, go on)",
    )
    max_consecutive_skips: int = arg(
        10,
        help="with nan_policy skip_step: stop after this many skipped steps in a row",
        gt=0,
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """A fit needs at least one stopping rule; a fractional eval_frequency is in (0, 1]."""
        if all(arguments[k] is None for k in ("max_steps", "num_steps", "num_epochs")):
            yield "give at least one of max_steps, num_steps or num_epochs"
        frequency = arguments["eval_frequency"]
        if isinstance(frequency, float) and frequency and not 0.0 < frequency <= 1.0:
            message = (
                "a float eval_frequency is a fraction of the fit's steps, in (0.0, 1.0]; "
                f"got {frequency!r} (write an int for a number of steps)"
            )
            yield about("eval_frequency", message)


@attrs.frozen
class CheckpointSettings:
    """When checkpoints are written and whether a run resumes from the newest one."""

    steps: int | None = arg(None, help="save every this many steps, and at the end", gt=0)
    autoload_last_checkpoint: bool = arg(
        True, help="resume from the newest checkpoint in model_dir when ckpt_path is unset"
    )
    save_initial_checkpoint: bool = arg(False, help="save a checkpoint before the first step")
    checkpoint_name: str = arg(
        "checkpoint_{step}.mdl",
        help="file name; holds {step} exactly once and no other {field} or '/'",
    )
    disable_strict_checkpoint_loading: bool = arg(
        False,
        help="load model weights non-strictly: keys missing from the checkpoint or unknown to "
        "the model are reported in the log, the rest is loaded",
    )
    checkpoint_root: str | None = arg(
        None, help="the folder checkpoints are written to and resumed from (None: model_dir)"
    )
    strict_version: bool = arg(
        True,
        help="a checkpoint written by another plugtrain major.minor version is an error "
        "(false: a warning)",
    )
    format: Literal["file", "dcp"] = arg(
        "file",
        help="file: one torch.save file per step; dcp: a torch.distributed.checkpoint folder "
        "per step (one shard file per process, reshards on load)",
        choices=("file", "dcp"),
    )
    async_save: bool = arg(
        False,
        help="dcp: save in the background (the loop waits only while the state is copied; "
        "a save waits for the previous one)",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The file name must tell steps apart, and find_latest must be able to read it back."""
        name = arguments["checkpoint_name"]
        problem = _checkpoint_name_problem(name)
        if problem is not None:
            yield about("checkpoint_name", f"{problem}, got {name!r}")
        if arguments.get("async_save") and arguments.get("format", "file") != "dcp":
            yield about("async_save", "async_save needs format: dcp")
        root = arguments["checkpoint_root"]
        yield from _blank_path("checkpoint_root", root)
        if isinstance(root, str) and "://" in root:
            message = (
                f"checkpoint_root {root!r} is a URL (S3): only the CSX appliance writes "
                "checkpoints there; give a folder"
            )
            yield about("checkpoint_root", message)


NAME_MAX = 255
"""The longest file name (in bytes) of common file systems (ext4, XFS, btrfs, APFS, NTFS)."""


def _blank_path(key: str, value: Any) -> Iterator[Problem]:
    """A path that is empty or only spaces (an unset ``${VAR}``) would mean the current folder."""
    if isinstance(value, str) and not value.strip():
        message = (
            f"must name a folder or file, got {value!r} (an unset environment variable?); "
            "an empty path would mean the current folder"
        )
        yield about(key, message)


def _checkpoint_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a checkpoint file name pattern, or ``None`` when it can.

    It must hold ``{step}`` exactly once and no other ``{`` or ``}``: another field (``{epoch}``)
    has no value when saving, and a second ``{step}`` could not be read back to resume.
    """
    if "/" in name:
        return "must be a file name: no '/'"
    count = name.count("{step}")
    rest = name.replace("{step}", "")
    if count != 1 or "{" in rest or "}" in rest:
        return "must hold '{step}' exactly once and no other '{' or '}'"
    # the hidden temporary of a save is ".NAME.1a2b3c4d", NAME with a 20-digit step
    longest = len(name.replace("{step}", "9" * 20).encode("utf-8")) + 10
    if longest > NAME_MAX:
        return (
            f"is too long a file name: with a 20-digit step and the temporary file's marks it "
            f"is {longest} bytes, over the {NAME_MAX}-byte limit of file systems"
        )
    return None


@attrs.frozen
class LoggingSettings:
    """How often metrics are logged, and how verbosely."""

    log_steps: int = arg(help="log training metrics every this many steps", gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = arg("INFO", help="log level")
    progress: bool | None = arg(
        None, help="show a progress bar (None: only when stderr is a terminal)"
    )
    wsc_log_level: dict[str, str | int] | list[str] | str | int | None = arg(
        None,
        help="log levels of Wafer-Scale Cluster servers ({task or server: level}); handed to "
        "the CSX backend, no effect elsewhere (said once)",
    )
    enable_act_frequency: bool = arg(
        False,
        help="CSX: fetch activations only every log_steps steps; no effect elsewhere (said once)",
    )
    on_error: Literal["stop", "continue"] | dict[str, Literal["stop", "continue"]] = arg(
        "stop",
        help="when a logger raises: stop (save the last completed step, then stop naming it) "
        "or continue without that logger; one value for all, or {logger name: value}",
    )


@attrs.frozen
class InitSection:
    """``trainer.init``: what to build (device or backend, model, optimizer, schedulers)."""

    device: str | None = arg(None, help="CPU, GPU or CSX (default settings of that backend)")
    backend: dict[str, Any] | None = arg(
        None, help="{backend_type: CPU|GPU|CSX, ...arguments of that backend}"
    )
    model_dir: str = arg("./model_dir", help="where checkpoints, metrics and plots go")
    seed: int | None = arg(
        None,
        help="seed of Python, numpy and torch",
        ge=0,
        le=2**64 - 1,  # what torch.manual_seed takes; numpy gets it modulo 2**32
        finite=False,
    )
    model: dict[str, Any] = arg(component="model", help="the model, {Name: {arguments}}")
    optimizer: dict[str, Any] | None = arg(
        None, component="optimizer", help="the optimizer, {Name: {arguments, params: [...]}}"
    )
    schedulers: list[Any] | None = arg(
        None, component="scheduler", many=True, help="schedulers, each {Name: {arguments}}"
    )
    loop: dict[str, Any] | None = arg(None, section=LoopSettings, help="loop settings")
    checkpoint: dict[str, Any] | None = arg(
        None, section=CheckpointSettings, help="checkpoint settings"
    )
    logging: dict[str, Any] | None = arg(None, section=LoggingSettings, help="logging settings")
    precision: dict[str, Any] | None = arg(
        None, section=PrecisionSettings, help="mixed precision, loss scaling, gradient clipping"
    )
    callbacks: list[Any] | None = arg(
        None,
        component="callback",
        many=True,
        help="callbacks, each {Name: {arguments}}; Name: null removes a default one",
    )
    loggers: list[Any] | None = arg(
        None,
        component="logger",
        many=True,
        help="metric loggers besides the default ProgressLogger and MetricsFilesLogger, each "
        "{Name: {arguments}}; Name: null removes a default one",
    )
    sparsity: Any = arg(
        None,
        help="weight sparsity: a level (one Static group), a group {algorithm, sparsity, "
        "param_filter, ...} or a list of groups; null: dense",
    )
    compile: str = arg(
        "off",
        choices=COMPILE,
        help="torch.compile the model: off, regional (each repeated block, such as a "
        "decoder's layers) or full (the whole model)",
    )
    activation_checkpointing: str = arg(
        "off",
        choices=ACTIVATION_CHECKPOINTING,
        help="recompute activations in the backward pass: off, full (every repeated block) or "
        "selective (every block, keeping the matmuls' and attention's outputs)",
    )
    profile: dict[str, Any] | None = arg(
        None,
        section=ProfileSettings,
        help="a torch.profiler window: {start_step, steps, memory}; a Chrome trace under "
        "model_dir/profile",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """``device`` and ``backend`` exclude each other (Model Zoo's message); a path is named."""
        if arguments["device"] is not None and arguments["backend"] is not None:
            yield MUTUALLY_EXCLUSIVE
        yield from _blank_path("model_dir", arguments["model_dir"])


@attrs.frozen
class FitSection:
    """``trainer.fit``: the data to train (and evaluate) on, and where to start from."""

    train_dataloader: dict[str, Any] = arg(component="dataloader", help="training data")
    val_dataloader: dict[str, Any] | None = arg(
        None, component="dataloader", help="evaluation data"
    )
    ckpt_path: str | None = arg(
        None, help="checkpoint to start from; null: none; unset: the newest in model_dir"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """A ``ckpt_path`` names a file."""
        yield from _blank_path("ckpt_path", arguments["ckpt_path"])


@attrs.frozen
class ValidateSection:
    """``trainer.validate``: evaluate only."""

    val_dataloader: dict[str, Any] = arg(component="dataloader", help="evaluation data")
    ckpt_path: str | None = arg(
        None, help="checkpoint to evaluate; null: none; unset: the newest in model_dir"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """A ``ckpt_path`` names a file."""
        yield from _blank_path("ckpt_path", arguments["ckpt_path"])


@attrs.frozen
class ValidateAllSection:
    """``trainer.validate_all``: evaluate several checkpoints on several data sets."""

    val_dataloaders: list[Any] | dict[str, Any] | None = arg(
        None,
        component="dataloader",
        many=True,
        help="one data loader {Name: {...}} or a list of them; none: the callbacks alone "
        "evaluate (a downstream harness such as EleutherEvalHarness)",
    )
    ckpt_paths: str | list[str] | None = arg(
        None,
        help="a checkpoint, a glob or a list of them; null: the model as it is; unset: every "
        "checkpoint in model_dir, in step order",
    )


@attrs.frozen
class TrainerSection:
    """One trainer: ``init`` plus ``fit``, ``validate`` and/or ``validate_all``."""

    init: dict[str, Any] = arg(section=InitSection, help="what to build")
    fit: dict[str, Any] | None = arg(None, section=FitSection, help="train")
    validate: dict[str, Any] | None = arg(None, section=ValidateSection, help="evaluate")
    validate_all: dict[str, Any] | None = arg(
        None,
        section=ValidateAllSection,
        help="evaluate checkpoints on data sets (plugtrain validate_all)",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """A trainer must have something to do (an evaluation harness alone counts)."""
        idle = all(arguments[k] is None for k in ("fit", "validate", "validate_all"))
        if idle and not _names_a_standalone_callback(arguments["init"]):
            yield NOTHING_TO_DO


NOTHING_TO_DO = "nothing to do: give 'fit', 'validate' and/or 'validate_all'"
"""What a trainer without work is told (not said where only its model is wanted)."""

STANDALONE_CALLBACKS = frozenset({"EleutherEvalHarness", "BigCodeEvalHarness"})
"""Callbacks that are a trainer's whole job without fit/validate sections: Model Zoo's
``cszoo lm_eval`` / ``bigcode_eval`` files (``plugtrain lm_eval`` runs them)."""


def _names_a_standalone_callback(init: Any) -> bool:
    callbacks = init.get("callbacks") if isinstance(init, Mapping) else None
    entries = callbacks if isinstance(callbacks, list) else [callbacks]
    return any(isinstance(e, Mapping) and STANDALONE_CALLBACKS & set(e) for e in entries)


@attrs.frozen
class RunFile:
    """A run file: one trainer, or a list of ``{trainer: ...}`` run in order."""

    trainer: Any = arg(help="a trainer mapping, or a list of {trainer: ...}")
    plugins: list[str] = arg([], help="local plugin modules to load (like -p MODULE)")
    sparsity: Any = arg(
        None,
        help="Model Zoo's legacy place of trainer.init.sparsity (for every trainer); "
        "add_summaries: true in it switches on LogSparsity",
    )
