"""What every scheduler shares: arguments from its schema, targeted groups, writing, state.

A scheduler class names its schema; its constructor signature is derived from that schema (so
the two cannot drift apart) and its values come from the schema's closed form, ``curve``. One
``step()`` costs one evaluation of that closed form and one write per targeted group.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from plugtrain.schema import bind_arguments, constructor_signature, validated_arguments
from plugtrain_schedulers._schema_base import ScheduleSchema
from plugtrain_schedulers._tags import select_param_groups
from plugtrain_schedulers.curves import Curve

__all__ = ["Scheduler"]


class Scheduler:
    """Base of every scheduler: writes ``curve(e)`` into the targeted groups' ``param_key``.

    ``e`` counts ``step()`` calls since construction; construction writes the value at
    ``e = 0``. The value never depends on a group's previous value.

    :ivar param_key: ``"lr"`` or ``"weight_decay"``.
    :ivar group_indices: indices of the targeted groups in ``optimizer.param_groups``.
    :ivar curve: the closed form, a :class:`~plugtrain_schedulers.curves.Curve`.
    :ivar last_step: ``e``.
    """

    schema: ClassVar[type[ScheduleSchema]]
    param_key: ClassVar[str] = "lr"
    takes_optimizer: ClassVar[bool] = True
    __signature__: ClassVar[inspect.Signature]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "schema" in cls.__dict__:
            context = ("optimizer",) if cls.takes_optimizer else ()
            cls.__signature__ = constructor_signature(cls.schema, context)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        arguments = self._bind(args, kwargs)
        name = type(self).__name__
        self.arguments: dict[str, Any] = validated_arguments(self.schema, arguments, owner=name)
        self.optimizer = self._optimizer
        self.param_group_tags = self.arguments["param_group_tags"]
        self.group_indices = select_param_groups(self.optimizer.param_groups, self.param_group_tags)
        self.curve: Curve = self._build_curve()
        self._at = self.curve.at
        self._factors = self._group_factors()
        self.last_step = 0
        self._apply()

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by name; takes the leading optimizer into ``self._optimizer``.

        :raises TypeError: without an optimizer, or for too many positional arguments.
        """
        arguments = self._bind_names(args, kwargs)
        self._optimizer = arguments.pop("optimizer", None)
        if not isinstance(self._optimizer, torch.optim.Optimizer):
            message = (
                f"{type(self).__name__} needs a torch.optim.Optimizer as its first argument, "
                f"got {type(self._optimizer).__name__}"
            )
            raise TypeError(message)
        return arguments

    def _bind_names(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by name, positional ones matched to the signature's order.

        Unknown keywords are kept for the schema to report, with suggestions.
        """
        return bind_arguments(type(self).__signature__, args, kwargs)

    def _build_curve(self) -> Curve:
        """The closed form; wrappers override this to build their children first."""
        return self.schema.curve(self.arguments, _no_children)

    def _group_factors(self) -> list[float] | None:
        """Per-group multipliers of the value (``None``: all 1)."""
        return None

    def _apply(self) -> None:
        value = self._at(self.last_step)
        self._last_value = value
        key = self.param_key
        groups = self.optimizer.param_groups
        if self._factors is None:
            for i in self.group_indices:
                groups[i][key] = value
        else:
            for i, factor in zip(self.group_indices, self._factors, strict=True):
                groups[i][key] = value * factor

    def step(self) -> None:
        """Advance one step and write the new value into the targeted groups."""
        self.last_step += 1
        self._apply()

    def value(self, step: int) -> float:
        """The scheduled value at ``step`` (before any per-group factor)."""
        return self._at(step)

    def get_last_value(self) -> list[float]:
        """The values last written, one per targeted group."""
        if self._factors is None:
            return [self._last_value] * len(self.group_indices)
        return [self._last_value * factor for factor in self._factors]

    def get_last_lr(self) -> list[float]:
        """Torch's name for :meth:`get_last_value`."""
        return self.get_last_value()

    @property
    def last_epoch(self) -> int:
        """Torch's name for :attr:`last_step`."""
        return self.last_step

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The targeted param groups."""
        groups = self.optimizer.param_groups
        return [groups[i] for i in self.group_indices]

    def state_dict(self) -> dict[str, Any]:
        """The position in the schedule; everything else is rebuilt from the arguments."""
        return {"last_step": self.last_step, "group_indices": list(self.group_indices)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the position and write its value into the groups at once.

        :raises ValueError: when the state was saved by a scheduler of other groups.
        """
        saved = state.get("group_indices")
        if saved is not None and list(saved) != list(self.group_indices):
            message = (
                f"{type(self).__name__} state targets param groups {list(saved)}, "
                f"this scheduler targets {self.group_indices}"
            )
            raise ValueError(message)
        self.last_step = int(state["last_step"])
        self._apply()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_step={self.last_step}, groups={self.group_indices})"


def _no_children(spec: Any) -> Curve:
    message = f"this scheduler takes no nested scheduler, got {spec!r}"
    raise TypeError(message)
