"""The hook implementations of plugtrain-callbacks (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_callbacks import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

CALLBACKS = {
    "ComputeNorm": ("norms:ComputeNorm", schemas.ComputeNormArgs),
    "CheckLoss": ("checks:CheckLoss", schemas.CheckLossArgs),
    "LogOptimizerParamGroup": (
        "optimizer:LogOptimizerParamGroup",
        schemas.LogOptimizerParamGroupArgs,
    ),
    "KeepNCheckpoints": ("checkpoints:KeepNCheckpoints", schemas.KeepNCheckpointsArgs),
    "LoadCheckpointStates": ("checkpoints:LoadCheckpointStates", schemas.LoadCheckpointStatesArgs),
    "RateProfiler": ("rate:RateProfiler", schemas.RateProfilerArgs),
    "GlobalFlags": ("flags:GlobalFlags", schemas.GlobalFlagsArgs),
    "ScopedTrainFlags": ("flags:ScopedTrainFlags", schemas.ScopedTrainFlagsArgs),
    "ScopedValidateFlags": ("flags:ScopedValidateFlags", schemas.ScopedValidateFlagsArgs),
}

LOGGERS = {
    "TensorBoardLogger": ("tensorboard:TensorBoardLogger", schemas.TensorBoardLoggerArgs),
    "WandbLogger": ("wandb_logger:WandbLogger", schemas.WandbLoggerArgs),
    "MLflowLogger": ("mlflow_logger:MLflowLogger", schemas.MLflowLoggerArgs),
}


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register the callbacks."""
    for name, (target, schema) in CALLBACKS.items():
        registry.register(name, f"plugtrain_callbacks.{target}", schema=schema)


@hookimpl
def plugtrain_register_loggers(registry: ComponentRegistrar) -> None:
    """Register the loggers."""
    for name, (target, schema) in LOGGERS.items():
        registry.register(name, f"plugtrain_callbacks.{target}", schema=schema)
