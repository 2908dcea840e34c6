"""What every scheduler shares: choosing param groups by tag, writing values, state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import torch

__all__ = ["Scheduler", "select_param_groups", "tag_set"]


def tag_set(tags: Any) -> set[str | None]:
    """A param group's (or a scheduler's) tags as a set; no tags means ``{None}``."""
    if tags is None:
        return {None}
    if isinstance(tags, str):
        return {tags}
    return set(tags)


def _wanted(param_group_tags: Any) -> set[str | None] | None:
    if param_group_tags is None:
        return None
    if isinstance(param_group_tags, str):
        return {param_group_tags}
    tags = list(param_group_tags)
    if len(set(tags)) != len(tags):
        message = f"param_group_tags contains duplicates: {tags!r}"
        raise ValueError(message)
    return set(tags)


def select_param_groups(param_groups: list[dict[str, Any]], param_group_tags: Any) -> list[int]:
    """Indices of the groups a scheduler with ``param_group_tags`` targets.

    :raises ValueError: when the tags select no group (the message lists the tags present).
    """
    wanted = _wanted(param_group_tags)
    if wanted is None:
        return list(range(len(param_groups)))
    chosen = [i for i, g in enumerate(param_groups) if tag_set(g.get("tags")) & wanted]
    if not chosen:
        present = sorted({repr(t) for g in param_groups for t in tag_set(g.get("tags"))})
        message = (
            f"param_group_tags {sorted(map(repr, wanted))} select no param group; "
            f"tags present: {', '.join(present)}"
        )
        raise ValueError(message)
    return chosen


class Scheduler:
    """Base of every scheduler: writes ``value(e)`` into the targeted groups' ``param_key``.

    ``e`` counts ``step()`` calls since construction; construction writes ``value(0)``.
    """

    param_key: ClassVar[str] = "lr"

    def __init__(self, optimizer: torch.optim.Optimizer, param_group_tags: Any = None) -> None:
        self.optimizer = optimizer
        self.param_group_tags = param_group_tags
        self.group_indices = select_param_groups(optimizer.param_groups, param_group_tags)
        self.last_step = 0
        self._apply()

    def value(self, step: int) -> float:
        """The scheduled value at step ``step``."""
        raise NotImplementedError

    def _apply(self) -> None:
        value = self.value(self.last_step)
        groups = self.optimizer.param_groups
        for i in self.group_indices:
            groups[i][self.param_key] = value
        self._last_values = [value for _ in self.group_indices]

    def step(self) -> None:
        """Advance one step and write the new value."""
        self.last_step += 1
        self._apply()

    def get_last_value(self) -> list[float]:
        """The values last written, one per targeted group."""
        return list(self._last_values)

    def get_last_lr(self) -> list[float]:
        """torch-compatible name of :meth:`get_last_value`."""
        return self.get_last_value()

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's position (and nothing that can be rebuilt from its arguments)."""
        return {"last_step": self.last_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the position and write its value into the groups at once."""
        self.last_step = int(state["last_step"])
        self._apply()

    @property
    def param_groups(self) -> Iterable[dict[str, Any]]:
        """The targeted param groups."""
        return [self.optimizer.param_groups[i] for i in self.group_indices]
