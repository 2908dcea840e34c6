"""What every plugtrain optimizer shares: argument checking, eager state, foreach grouping."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

from plugtrain.schema import validated_arguments

__all__ = ["PlugtrainOptimizer", "as_float"]


def as_float(value: float | torch.Tensor) -> float:
    """A hyperparameter as a Python float (schedulers may store 0-dim tensors in groups)."""
    return float(value)


class PlugtrainOptimizer(torch.optim.Optimizer):
    """Base of the plugtrain optimizers.

    Subclasses set ``schema`` (their attrs argument schema), implement :meth:`init_state` (state
    is created at construction, so ``state_dict()`` is complete before the first step) and
    :meth:`update_group` (one step of one param group, given the parameters that have gradients).
    """

    schema: ClassVar[type]
    name: ClassVar[str]

    def __init__(self, params: Iterable[Any], **arguments: Any) -> None:
        defaults = validated_arguments(self.schema, arguments, owner=self.name)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.init_state(p, self.state[p], group)

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the optimizer state of ``param`` (default: none)."""

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """Apply one update to ``params`` of ``group`` (all have gradients)."""
        raise NotImplementedError

    @staticmethod
    def foreach_groups(
        tensorlists: list[list[torch.Tensor]],
    ) -> Iterable[list[list[torch.Tensor]]]:
        """Split parallel tensor lists into runs that share device and dtype."""
        grouped = _group_tensors_by_device_and_dtype(tensorlists)  # type: ignore[arg-type]
        for lists, _indices in grouped.values():
            yield lists

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one optimization step; ``closure`` re-evaluates the loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if any(g.is_sparse for g in grads):
                message = f"{self.name} does not support sparse gradients"
                raise RuntimeError(message)
            self.update_group(group, params, grads)  # type: ignore[arg-type]
        return loss

    def use_foreach(self, group: dict[str, Any], params: list[torch.Tensor]) -> bool:
        """Whether ``group`` takes the multi-tensor path (default: yes unless switched off)."""
        foreach = group.get("foreach")
        if foreach is None:
            return not torch.jit.is_scripting()
        return bool(foreach)
