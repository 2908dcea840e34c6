"""What a Trainer is given, made into its parts: settings, the backend, optimizer, schedulers.

``Trainer(...)`` takes each of these as an object, a callable building one, or a mapping as a
run file writes it; these functions turn any of them into the object, checked as the Trainer
needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain.bases.backend import backend as make_backend
from plugtrain.bases.backend import check_backend, claim_backend_type
from plugtrain.config.validation.sharding import optimizer_refusal
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.discovery.loading import get_registry
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.schema import validated_arguments
from plugtrain.train.components.optimization import build_optimization
from plugtrain.train.components.scheduler_checks import check_scheduler_overlap

__all__ = ["as_list", "backend_from", "optimizer_from", "schedulers_from", "settings_from"]


def settings_from(cls: type, value: Any, owner: str) -> Any:
    """``value`` as settings of ``cls``: as it is (``None`` or a ``cls``), else from its mapping.

    :raises ConfigError: ``value`` is neither, or its mapping does not validate (at ``owner``).
    """
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        message = f"{owner} must be a mapping or {cls.__name__}, got {type(value).__name__}"
        raise ConfigError([ConfigIssue(owner, message)])
    return cls(**validated_arguments(cls, value, owner=owner))


def as_list(value: Any) -> list[Any]:
    """``None`` as ``[]``, a list or tuple as a list, anything else as a list of one."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


def backend_from(device: str | None, backend: Any) -> Any:
    """The backend object, checked against the Backend protocol, its type claimed.

    :param device: ``"CPU"``, ``"GPU"`` or ``"CSX"`` (used when ``backend`` is ``None``).
    :param backend: a backend object, its type name, or ``{backend_type: ..., ...}``.
    """
    if backend is None:
        backend = make_backend(device or "CPU")
    elif isinstance(backend, str):
        backend = make_backend(backend)
    elif isinstance(backend, Mapping):
        arguments = dict(backend)
        backend_type = arguments.pop("backend_type", None)
        if not isinstance(backend_type, str):
            message = "a backend mapping needs backend_type (CPU, GPU or CSX)"
            raise ConfigError([ConfigIssue("backend", message)])
        backend = make_backend(backend_type, **arguments)
    check_backend(backend)
    claim_backend_type(backend.backend_type)
    return backend


def optimizer_from(
    optimizer: Any,
    schedulers: list[Any],
    model: nn.Module,
    strategy: ParallelStrategy,
    backend: Any,
) -> tuple[Any, list[Any] | None]:
    """The optimizer, and the schedulers when written as a run file writes them.

    ``optimizer={"AdamW": {...}}`` and ``schedulers=[{"LinearLR": {...}}]`` are built as
    ``plugtrain.build_optimization`` builds a run file's (``None``: build the schedulers from
    the objects or callables given, with :func:`schedulers_from`).

    :param model: the module that holds the weights.
    :param strategy: under sharded parameters, an optimizer that does not step them is refused.
    """
    written = [s for s in schedulers if isinstance(s, Mapping)]
    if not isinstance(optimizer, Mapping):
        if written:
            message = (
                "schedulers written as {Name: {arguments}} need the optimizer written so "
                "too ({Name: {arguments}}), or give scheduler objects or callables"
            )
            raise ConfigError([ConfigIssue("schedulers", message)])
        return _optimizer(optimizer, model, strategy, backend), None
    if len(written) != len(schedulers):
        message = "give every scheduler as {Name: {arguments}} with an optimizer mapping"
        raise ConfigError([ConfigIssue("schedulers", message)])
    config = {"optimizer": dict(optimizer), "schedulers": written}
    built = build_optimization(model, config)
    return _optimizer(built.optimizer, model, strategy, backend), list(built.schedulers)


def _optimizer(optimizer: Any, model: nn.Module, strategy: ParallelStrategy, backend: Any) -> Any:
    if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
        made = optimizer
    elif callable(optimizer):
        made = optimizer(model)
    else:
        kind = type(optimizer).__name__
        message = (
            "optimizer must be an optimizer, a callable taking the model, or a mapping "
            f"{{Name: {{arguments}}}} as in a run file, got {kind}"
        )
        raise ConfigError([ConfigIssue("optimizer", message)])
    if made is not None and strategy.sharded_parameters and strategy.world_size > 1:
        mode = getattr(backend, "data_parallel", "fsdp2")
        refusal = optimizer_refusal(get_registry(), type(made), mode)
        if refusal is not None:  # as `plugtrain check` says of a run file
            raise ConfigError([ConfigIssue("optimizer", refusal)])
    return made


def schedulers_from(given: list[Any], optimizer: Any, built: list[Any] | None) -> list[Any]:
    """The schedulers: ``built`` from mappings, else each given one or its callable's result.

    :raises ConfigError: two schedulers set the same setting of one param group.
    """
    schedulers = built or [s if hasattr(s, "step") else s(optimizer) for s in given]
    check_scheduler_overlap(schedulers)
    return schedulers
