"""The core's own plugin: built-in models, data loaders, the default loggers and callback.

Registered like any other plugin (under the name ``builtin``; block it with ``-p no:builtin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain.builtin import schemas
from plugtrain.contract.hookspecs import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry.components import ComponentRegistrar


@hookimpl
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Register the built-in models."""
    registry.register("MLP", "plugtrain.builtin.models:MLP", schema=schemas.MLPArgs)


@hookimpl
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Register the built-in data loaders."""
    registry.register("Digits", "plugtrain.builtin.data:digits_loader", schema=schemas.DigitsArgs)
    registry.register(
        "Synthetic", "plugtrain.builtin.data:synthetic_loader", schema=schemas.SyntheticArgs
    )
    registry.register(
        "StdlibText", "plugtrain.builtin.text:stdlib_text_loader", schema=schemas.StdlibTextArgs
    )


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register the default callback (on in every trainer unless removed with ``Name: null``)."""
    registry.register(
        "Throughput",
        "plugtrain.train.observability.throughput:Throughput",
        schema=schemas.ThroughputArgs,
    )


@hookimpl
def plugtrain_register_loggers(registry: ComponentRegistrar) -> None:
    """Register the default loggers (on in every trainer unless removed with ``Name: null``)."""
    registry.register(
        "ProgressLogger",
        "plugtrain.train.observability.loggers:ProgressLogger",
        schema=schemas.ProgressLoggerArgs,
    )
    registry.register(
        "MetricsFilesLogger",
        "plugtrain.train.observability.loggers:MetricsFilesLogger",
        schema=schemas.MetricsFilesLoggerArgs,
    )
