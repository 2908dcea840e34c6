"""Hook implementations of plugtrain-backends (entry point ``backends``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_backends import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_backends(registry: ComponentRegistrar) -> None:
    """Register every backend of this distribution."""
    registry.register("CPU", "plugtrain_backends.cpu:CPUBackend", schema=schemas.CPUArgs)
    registry.register("GPU", "plugtrain_backends.gpu:GPUBackend", schema=schemas.GPUArgs)
    registry.register("CSX", "plugtrain_backends.csx:CSXBackend", schema=schemas.CSXArgs)
