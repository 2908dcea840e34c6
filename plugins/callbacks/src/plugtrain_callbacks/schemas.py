"""Argument schemas of the callbacks and loggers (torch-free: ``plugtrain check`` reads them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from plugtrain.schema import Problem, about, arg, arg_infos
from plugtrain_callbacks._extras import missing_extra

CHECKPOINT_STATES = (
    "model",
    "optimizer",
    "schedulers",
    "grad_scaler",
    "global_step",
    "dataloader",
    "sparsity",
)
"""The parts of a checkpoint that ``LoadCheckpointStates`` chooses from (Model Zoo's names).

``sparsity`` is the sparsity algorithms' state (their step and schedule positions); the masks
themselves are in ``model``."""

STATE_SPELLINGS = {"lr_scheduler": "schedulers", "lr_schedulers": "schedulers"}
"""Other spellings Model Zoo users write for a part."""


def checkpoint_states(value: str | list[str]) -> set[str] | None:
    """The parts that ``load_checkpoint_states`` names (``None``: ``all``), spellings resolved.

    :raises ValueError: naming a part that is none of :data:`CHECKPOINT_STATES`.
    """
    if isinstance(value, str) and value.strip().lower() == "all":
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    found = set()
    for name in (n.strip() for n in names):
        part = STATE_SPELLINGS.get(name, name)
        if part not in CHECKPOINT_STATES:
            accepted = ", ".join(CHECKPOINT_STATES)
            message = f"unknown checkpoint state {name!r}; accepted: all, or any of {accepted}"
            raise ValueError(message)
        found.add(part)
    return found


@attrs.frozen
class ComputeNormArgs:
    """Gradient and weight norms into the training metrics (model_wise_grad_norm ...)."""


@attrs.frozen
class CheckLossArgs:
    """Stop with an error when a training or validation loss is NaN or infinite."""


@attrs.frozen
class LogOptimizerParamGroupArgs:
    """Log param-group values (lr, momentum ...) of every group as KEY/GROUP metrics."""

    keys: str | list[str] = arg(help="the param-group keys to log (one or a list)")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """At least one key, each a non-empty string."""
        keys = arguments["keys"]
        names = [keys] if isinstance(keys, str) else keys
        if not names or not all(isinstance(k, str) and k for k in names):
            yield about("keys", f"must name at least one param-group key, got {keys!r}")


@attrs.frozen
class KeepNCheckpointsArgs:
    """Keep only the newest n checkpoints this run wrote (its older ones are deleted)."""

    n: int | None = arg(None, help="checkpoints to keep (None: all)", gt=0)


@attrs.frozen
class LoadCheckpointStatesArgs:
    """Restore only some parts of a checkpoint (model, optimizer, ...); keep the rest as built."""

    load_checkpoint_states: str | list[str] = arg(
        "all",
        help="all, or the parts to load: a list or comma-separated string of model, optimizer, "
        "schedulers, grad_scaler, global_step, dataloader, sparsity",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """Every part named must be a checkpoint part."""
        try:
            checkpoint_states(arguments["load_checkpoint_states"])
        except ValueError as exc:
            yield about("load_checkpoint_states", str(exc))


@attrs.frozen
class RateProfilerArgs:
    """Samples and steps per second into the training metrics (rate/...)."""


MICRO_BATCH_WORDS = ("auto", "explore")


@attrs.frozen
class _FlagsArgs:
    """Cerebras csx.* flags, written with their dotted names."""

    csx_performance_micro_batch_size: int | str | None = arg(
        None,
        aliases=("csx.performance.micro_batch_size",),
        help="micro-batch size: a positive int, auto or explore",
    )
    csx_performance_transfer_processes: int | None = arg(
        None, aliases=("csx.performance.transfer_processes",), help="data transfer processes", gt=0
    )
    csx_precision_optimization_level: int | None = arg(
        None,
        aliases=("csx.precision.optimization_level",),
        help="precision optimization level (POL)",
        ge=0,
        le=2,
    )
    csx_debug_debug_args: dict[str, Any] | None = arg(
        None, aliases=("csx.debug.debug_args",), help="debug arguments"
    )
    csx_debug_ini: dict[str, Any] | None = arg(
        None, aliases=("csx.debug.ini",), help="debug ini settings"
    )
    csx_debug_retrace_every_iteration: bool | None = arg(
        None, aliases=("csx.debug.retrace_every_iteration",), help="retrace each iteration"
    )
    csx_debug_lazy_initialization: bool | None = arg(
        None, aliases=("csx.debug.lazy_initialization",), help="initialise weights lazily"
    )
    csx_debug_log_initialization: bool | None = arg(
        None, aliases=("csx.debug.log_initialization",), help="log weight initialisation"
    )
    csx_debug_compile_crd_memory_gi: int | None = arg(
        None, aliases=("csx.debug.compile_crd_memory_gi",), help="compile memory (GiB)", gt=0
    )
    csx_debug_execute_crd_memory_gi: int | None = arg(
        None, aliases=("csx.debug.execute_crd_memory_gi",), help="execute memory (GiB)", gt=0
    )
    csx_debug_wrk_memory_gi: int | None = arg(
        None, aliases=("csx.debug.wrk_memory_gi",), help="worker memory (GiB)", gt=0
    )
    csx_debug_act_memory_gi: int | None = arg(
        None, aliases=("csx.debug.act_memory_gi",), help="activation server memory (GiB)", gt=0
    )
    csx_debug_cmd_memory_gi: int | None = arg(
        None, aliases=("csx.debug.cmd_memory_gi",), help="command server memory (GiB)", gt=0
    )
    csx_debug_wgt_memory_gi: int | None = arg(
        None, aliases=("csx.debug.wgt_memory_gi",), help="weight server memory (GiB)", gt=0
    )
    csx_debug_chf_memory_gi: int | None = arg(
        None, aliases=("csx.debug.chf_memory_gi",), help="chief server memory (GiB)", gt=0
    )
    csx_debug_drop_data: bool | None = arg(
        None, aliases=("csx.debug.drop_data",), help="drop weight data that is not needed"
    )
    csx_debug_skip_weight_init: bool | None = arg(
        None, aliases=("csx.debug.skip_weight_init",), help="initialise every weight to zeros"
    )
    csx_debug_optimize_initialization: bool | None = arg(
        None,
        aliases=("csx.debug.optimize_initialization",),
        help="optimise the weight initialisation graph",
    )
    csx_debug_implicit_cast_cb16_to_fp32: bool | None = arg(
        None,
        aliases=("csx.debug.implicit_cast_cb16_to_fp32",),
        help="cast cbfloat16 tensors to float32 in step closures",
    )
    csx_debug_save_gpv: bool | None = arg(
        None, aliases=("csx.debug.save_gpv",), help="save the global performance view"
    )
    csx_debug_check_constraints: bool | None = arg(
        None, aliases=("csx.debug.check_constraints",), help="check constraints on torch ops"
    )
    csx_debug_op_definition_module: str | None = arg(
        None,
        aliases=("csx.debug.op_definition_module",),
        help="module defining the ops whose constraints are checked",
    )
    csx_debug_skip_connectivity_check: bool | None = arg(
        None, aliases=("csx.debug.skip_connectivity_check",), help="skip the connectivity check"
    )
    csx_debug_fabric_type_blacklist: list[str] | None = arg(
        None,
        aliases=("csx.debug.fabric_type_blacklist",),
        help="fabric types (CS-2, CS-3) the job must not run on",
    )
    csx_performance_max_transfer_bytes: int | None = arg(
        None,
        aliases=("csx.performance.max_transfer_bytes",),
        help="bytes one transfer process sends at once",
        ge=0,
    )
    csx_performance_compress_weights: bool | None = arg(
        None, aliases=("csx.performance.compress_weights",), help="compress weights when saved"
    )
    csx_performance_use_speculative_optimizers: bool | None = arg(
        None,
        aliases=("csx.performance.use_speculative_optimizers",),
        help="enable speculative optimizers",
    )
    csx_cluster_auto_taint: bool | None = arg(
        None,
        aliases=("csx.cluster.auto_taint",),
        help="taint systems automatically when a taint action is found",
    )
    csx_storage_s3_profile: str | None = arg(
        None, aliases=("csx.storage.s3.profile",), help="the AWS profile of S3 storage"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """A micro-batch size is a positive int or one of Model Zoo's words."""
        size = arguments["csx_performance_micro_batch_size"]
        bad_int = isinstance(size, int) and (isinstance(size, bool) or size <= 0)
        if bad_int or (isinstance(size, str) and size not in MICRO_BATCH_WORDS):
            message = f"must be a positive int, auto or explore, got {size!r}"
            yield about("csx_performance_micro_batch_size", message)


def flag_name(field: str) -> str:
    """``csx_performance_micro_batch_size`` -> ``csx.performance.micro_batch_size``."""
    for info in arg_infos(_FlagsArgs):
        if info.name == field:
            return info.aliases[0]
    raise KeyError(field)


@attrs.frozen
class GlobalFlagsArgs(_FlagsArgs):
    """Set Cerebras csx.* flags for the whole process (CSX backend; inert elsewhere)."""


@attrs.frozen
class ScopedTrainFlagsArgs(_FlagsArgs):
    """Set Cerebras csx.* flags during fit, restored after (CSX backend; inert elsewhere)."""


@attrs.frozen
class ScopedValidateFlagsArgs(_FlagsArgs):
    """Set Cerebras csx.* flags during each evaluation, restored after (CSX; inert elsewhere)."""


def _extra_problem(logger: str) -> Iterator[str]:
    problem = missing_extra(logger)
    if problem is not None:
        yield problem


@attrs.frozen
class TensorBoardLoggerArgs:
    """TensorBoard event files of every metric (needs the tensorboard extra)."""

    summary_dir: str | None = arg(None, help="where the event files go (None: model_dir/events)")
    legacy_event_dirs: bool = arg(
        False, help="one event directory per split, model_dir/train and model_dir/eval"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """The tensorboard package must be installed."""
        yield from _extra_problem("TensorBoardLogger")


@attrs.frozen
class WandbLoggerArgs:
    """Weights & Biases runs (needs the wandb extra; WANDB_MODE=offline works without a login)."""

    project: str | None = arg(None, help="the project of the run")
    group: str | None = arg(None, help="the group of the run")
    run_id: str | None = arg(None, help="the run's unique id (None: a new one, or the last)")
    run_name: str | None = arg(None, help="the run's display name")
    job_type: str | None = arg(None, help="the type of job")
    tags: list[str] | None = arg(None, help="tags of the run")
    resume: Literal["never", "allow", "auto", "must"] = arg(
        "auto", help="whether to continue the run found in model_dir/wandb"
    )
    entity: str | None = arg(None, help="the user or team the run belongs to")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """The wandb package must be installed."""
        yield from _extra_problem("WandbLogger")


@attrs.frozen
class MLflowLoggerArgs:
    """MLflow runs (needs the mlflow extra; a local file store by default)."""

    tracking_uri: str | None = arg(
        None, help="the tracking store (None: the folder model_dir/mlruns)"
    )
    experiment_name: str = arg("plugtrain", help="the experiment the run belongs to")
    run_name: str | None = arg(None, help="the run's name")
    tags: dict[str, str] | None = arg(None, help="tags of the run")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """The mlflow package must be installed."""
        yield from _extra_problem("MLflowLogger")
