"""What may run under FSDP2: optimizers, sparsity and callbacks checked before launch (torch-free).

A backend with ``data_parallel: fsdp2`` or ``hsdp`` gives every parameter to the optimizer and
the callbacks as a DTensor holding this process's shard. A component says whether it copes
through its argument schema's class attribute ``supports_sharded_params`` (read here from the
registry without importing the component, so ``plugtrain check`` stays torch-free):

- optimizers: ``False`` unless declared (an update that needs whole tensors, a norm per tensor
  or a matrix's shape, would silently compute it per shard);
- callbacks: ``True`` unless declared ``False`` (most never touch a parameter);
- sparsity: refused (its masks cover whole tensors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.config.plan import BackendPlan
from plugtrain.errors import DuplicateNameError, UnknownNameError
from plugtrain.registry.components import Registry

__all__ = ["SHARDED_MODES", "check_sharding", "optimizer_refusal", "supports_sharded_params"]

SHARDED_MODES = ("fsdp2", "hsdp")
"""The ``data_parallel`` values that shard parameters."""

FLAG = "supports_sharded_params"
"""The schema class attribute a component declares its support with."""


def supports_sharded_params(registry: Registry, kind: str, name: str) -> bool | None:
    """What the component's schema declares (``None``: unknown name, reported elsewhere)."""
    try:
        schema = registry.lookup(kind, name).schema_class
    except (UnknownNameError, DuplicateNameError):
        return None
    return bool(getattr(schema, FLAG, kind != "optimizer"))


def _would(registry: Registry, kind: str) -> str:
    names = [n for n in registry.names(kind) if supports_sharded_params(registry, kind, n)]
    unique = {n.lower(): n for n in sorted(names, reverse=True)}  # aliases differ in case
    return ", ".join(sorted(unique.values(), key=str.lower)) or "none installed"


def _one_name(value: Any) -> str | None:
    if isinstance(value, Mapping) and len(value) == 1:
        name = next(iter(value))
        return name if isinstance(name, str) else None
    return None


def check_sharding(
    checker: Any, init: Mapping[str, Any], path: tuple[Any, ...], backend: BackendPlan
) -> None:
    """Report the optimizer, sparsity and callbacks of ``init`` that FSDP2 cannot run.

    :param checker: the :class:`~.checker.Checker` collecting the problems.
    :param path: the path of ``init`` (``trainer.init``).
    """
    mode = backend.arguments.get("data_parallel", "ddp")
    if mode not in SHARDED_MODES:
        return
    registry = checker.registry
    optimizer = init.get("optimizer")
    name = _one_name(optimizer)
    if name is not None and supports_sharded_params(registry, "optimizer", name) is False:
        message = (
            f"{name} cannot run on sharded parameters (data_parallel: {mode}): it does not "
            f"declare {FLAG}; optimizers that do: {_would(registry, 'optimizer')}"
        )
        checker.add((*path, "optimizer", name), message, optimizer, name, of_key=True)
    if init.get("sparsity") is not None:
        message = (
            f"sparsity cannot run under data_parallel: {mode} (its masks cover whole "
            "tensors); use data_parallel: ddp"
        )
        checker.add((*path, "sparsity"), message, init, "sparsity", of_key=True)
    callbacks = init.get("callbacks")
    for index, entry in enumerate(callbacks if isinstance(callbacks, list) else ()):
        name = _one_name(entry)
        if name is not None and supports_sharded_params(registry, "callback", name) is False:
            message = (
                f"{name} cannot run on sharded parameters (data_parallel: {mode}): it "
                f"declares {FLAG} = False"
            )
            checker.add((*path, "callbacks", index, name), message, entry, name, of_key=True)


def _implements(target: str, cls: type) -> bool:
    module, _, attribute = target.partition(":")
    home = cls.__module__
    return attribute == cls.__qualname__ and (home == module or home.startswith(module + "."))


def _spelling(registry: Registry, component: Any) -> str:
    """The component's name, qualified by its plugin where the bare name means another."""
    try:
        if registry.lookup("optimizer", component.name) is component:
            return str(component.name)
    except (UnknownNameError, DuplicateNameError):
        pass
    return f"{component.plugin.name}:{component.name}"


def optimizer_refusal(registry: Registry, optimizer_class: type, mode: str) -> str | None:
    """Why an optimizer made in Python cannot step sharded parameters; ``None`` if it can.

    The components registered with ``optimizer_class`` as their target (``torch.optim:Adam``
    for ``torch.optim.adam.Adam``) answer through their schemas, as ``check`` reads them: one
    that declares the flag is enough. A class no plugin registers answers through its own
    ``supports_sharded_params`` attribute; undeclared, it is trusted (the user's own code).
    """
    registered = [
        c for c in registry.components("optimizer") if _implements(c.target, optimizer_class)
    ]
    if registered:
        declared = any(getattr(c.schema_class, FLAG, False) for c in registered)
    else:
        declared = getattr(optimizer_class, FLAG, True) is not False
    if declared:
        return None
    name = _spelling(registry, registered[0]) if registered else optimizer_class.__name__
    return (
        f"{name} cannot run on sharded parameters (data_parallel: {mode}): it does not declare "
        f"{FLAG}; optimizers that do: {_would(registry, 'optimizer')}"
    )
