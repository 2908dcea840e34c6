"""Argument schemas of the optimizers (torch-free: ``plugtrain check`` imports only this)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain.schema import arg


def _lr(default: Any = ...) -> Any:
    if default is ...:
        return arg(help="learning rate", ge=0, aliases=("learning_rate",))
    return arg(default, help="learning rate", ge=0, aliases=("learning_rate",))


def _foreach() -> Any:
    return arg(None, help="use the multi-tensor (foreach) path; None picks it where supported")


@attrs.frozen
class SGDArgs:
    """Stochastic gradient descent with momentum, dampening from the first step (cstorch).

    ``buf = momentum * buf + (1 - dampening) * g`` with ``buf`` starting at zero, L2
    ``weight_decay`` added to the gradient, optional Nesterov momentum.
    """

    lr: float = _lr()
    momentum: float = arg(0.0, help="momentum factor", ge=0)
    dampening: float = arg(0.0, help="dampening of the momentum", ge=0)
    weight_decay: float = arg(0.0, help="L2 penalty added to the gradient", ge=0)
    nesterov: bool = arg(False, help="use Nesterov momentum (needs momentum > 0, dampening 0)")
    maximize: bool = arg(False, help="maximize the objective instead of minimizing it")
    foreach: bool | None = _foreach()

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """Nesterov momentum needs a positive momentum and zero dampening."""
        if arguments["nesterov"] and (arguments["momentum"] <= 0 or arguments["dampening"] != 0):
            yield (
                "nesterov=True needs momentum > 0 and dampening = 0, got "
                f"momentum={arguments['momentum']!r}, dampening={arguments['dampening']!r}"
            )
