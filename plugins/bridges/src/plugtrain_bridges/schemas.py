"""Argument schemas of the bridged optimizers, made from the generated table (torch-free).

A schema is an attrs class built on first use; components name it by the import string
``plugtrain_bridges.schemas:torch_optim.Adam`` (or ``pytorch_optimizer.ADOPT``), so building the
registry makes none. The annotations are the table's type strings, resolved here by
``typing.get_type_hints`` (hence the imports below).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from plugtrain.schema import arg
from plugtrain_bridges import table
from plugtrain_bridges.generate import REQUIRED

__all__ = ["STEPS_SHARDS", "Schemas", "pytorch_optimizer", "schema_for", "torch_optim"]

_ = Any  # the table's "Any" annotations resolve in this module's namespace


STEPS_SHARDS: dict[str, frozenset[str]] = {
    "torch": frozenset(
        (
            *("ASGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "RAdam"),
            *("RMSprop", "SGD"),
        )
    ),
}
"""The bridged optimizers that step FSDP2's DTensor shards exactly as whole tensors (checked in
tests/test_sharded.py; torch's Adafactor and Rprop fail on shards, its Muon differs, SparseAdam
needs sparse gradients). The others declare ``supports_sharded_params = False``: ``plugtrain
check`` refuses them under ``data_parallel: fsdp2``/``hsdp``."""


def schema_for(library: str, name: str) -> type:
    """The attrs schema of ``name`` from ``library`` (a key of ``table.OPTIMIZERS``)."""
    target, summary, arguments = table.OPTIMIZERS[library][name]
    version = table.VERSIONS[library]
    fields = {}
    annotations = {}
    for argument, type_name, default, help_text, choices in arguments:
        keywords: dict[str, Any] = {"help": help_text}
        if isinstance(default, float) and not math.isfinite(default):
            keywords["finite"] = False  # an unbounded default (max_grad_norm=inf): allow it
        if choices:
            keywords["choices"] = choices
        fields[argument] = arg(**keywords) if default == REQUIRED else arg(default, **keywords)
        annotations[argument] = type_name
    doc = f"{summary}\n\n{name} of {library} {version} ({target}), bridged by plugtrain-bridges."
    namespace = {"__annotations__": annotations, "__doc__": doc, "__module__": __name__, **fields}
    namespace["supports_sharded_params"] = name in STEPS_SHARDS.get(library, frozenset())
    cls = type(f"{name}Args", (), namespace)
    return attrs.frozen(cls)


class Schemas:
    """The schemas of one library, made on first access: ``torch_optim.Adam``."""

    def __init__(self, library: str) -> None:
        self._library = library
        self._made: dict[str, type] = {}

    def __getattr__(self, name: str) -> type:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._made[name]
        except KeyError:
            pass
        if name not in table.OPTIMIZERS.get(self._library, {}):
            message = f"{self._library} has no bridged optimizer {name!r}"
            raise AttributeError(message)
        made = self._made[name] = schema_for(self._library, name)
        return made


torch_optim = Schemas("torch")
pytorch_optimizer = Schemas("pytorch-optimizer")
