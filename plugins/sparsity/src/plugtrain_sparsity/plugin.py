"""The hook implementations of plugtrain-sparsity (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_sparsity import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

ALGORITHMS = {
    "Static": ("static:Static", schemas.StaticArgs),
    "GMP": ("gmp:GMP", schemas.GMPArgs),
    "SET": ("set:SET", schemas.SETArgs),
    "RigL": ("rigl:RigL", schemas.RigLArgs),
}

CALLBACKS = {
    "LogSparsity": ("log:LogSparsity", schemas.LogSparsityArgs),
}


@hookimpl
def plugtrain_register_sparsity(registry: ComponentRegistrar) -> None:
    """Register the sparsity algorithms."""
    for name, (target, schema) in ALGORITHMS.items():
        registry.register(name, f"plugtrain_sparsity.{target}", schema=schema)


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register the LogSparsity callback."""
    for name, (target, schema) in CALLBACKS.items():
        registry.register(name, f"plugtrain_sparsity.{target}", schema=schema)
