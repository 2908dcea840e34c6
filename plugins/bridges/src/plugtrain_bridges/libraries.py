"""The libraries the bridge exposes, described without importing them.

Each :class:`Library` is a plugin of its own (entry point ``torch`` and ``pytorch-optimizer``), so
its names answer to ``torch:Adamax`` or ``pytorch-optimizer:Lamb`` and ``-p no:torch`` blocks it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

import attrs

__all__ = ["LIBRARIES", "Library", "library_named"]


def _torch_optimizers() -> Iterator[tuple[str, type]]:
    optim: Any = importlib.import_module("torch.optim")
    for name in optim.__all__:
        candidate = getattr(optim, name, None)
        if (
            isinstance(candidate, type)
            and issubclass(candidate, optim.Optimizer)
            and candidate is not optim.Optimizer
        ):
            yield name, candidate


def _pytorch_optimizer_optimizers() -> Iterator[tuple[str, type]]:
    library: Any = importlib.import_module("pytorch_optimizer")
    optim: Any = importlib.import_module("torch.optim")
    seen: set[type] = set()
    for key in library.get_supported_optimizers():
        cls = library.load_optimizer(key)
        # its list also names some of torch's own (and aliases): those belong to the torch bridge
        if not isinstance(cls, type) or cls in seen or cls.__module__.startswith("torch."):
            continue
        if not issubclass(cls, optim.Optimizer):
            continue
        seen.add(cls)
        yield cls.__name__, cls


@attrs.frozen
class Library:
    """One library whose optimizers the bridge registers.

    :param name: the plugin's name: what qualifies a name (``torch:Adamax``).
    :param module: the import name that tells whether it is installed.
    :param distribution: what to ``pip install``.
    :param home: the module whose attributes are the public names (the table's import targets
        use it where it exports the class under its name).
    :param classes: lists its optimizer classes as ``(name, class)``; imports the library.
    """

    name: str
    module: str
    distribution: str
    home: str
    classes: Callable[[], Iterator[tuple[str, type]]] = attrs.field(repr=False)

    def installed(self) -> bool:
        """Whether the library can be imported (found without importing it)."""
        return importlib.util.find_spec(self.module) is not None

    def optimizer_classes(self) -> Iterator[tuple[str, type]]:
        """Its optimizer classes; imports the library."""
        return self.classes()


LIBRARIES = (
    Library("torch", "torch", "torch", "torch.optim", _torch_optimizers),
    Library(
        "pytorch-optimizer",
        "pytorch_optimizer",
        "pytorch-optimizer",
        "pytorch_optimizer",
        _pytorch_optimizer_optimizers,
    ),
)


def library_named(name: str) -> Library:
    """The :class:`Library` called ``name``."""
    return next(library for library in LIBRARIES if library.name == name)
