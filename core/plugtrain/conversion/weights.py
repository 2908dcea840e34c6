"""Weight rules applied to a stream of tensors, in either direction.

Tensors arrive one at a time (one shard in memory); each is matched to the first rule one of whose
names fits it, and waits in its group until every name of the rule has arrived; then the rule's
transform makes the other side's tensors and the group is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from plugtrain.conversion.declaration import (
    ConversionContext,
    ConversionError,
    WeightRule,
)

__all__ = ["RuleApplier"]

_OTHER = {"hf": "plugtrain", "plugtrain": "hf"}


class RuleApplier:
    """Turns tensors named on ``side`` (``"hf"`` or ``"plugtrain"``) into the other side's."""

    def __init__(self, rules: Sequence[WeightRule], side: str, context: ConversionContext) -> None:
        self.rules = [r for r in rules if r.when is None or r.when(context)]
        self.side = side
        self.context = context
        self._patterns = [(i, rule.patterns(side)) for i, rule in enumerate(self.rules)]
        self._groups: dict[tuple[int, tuple[tuple[str, str], ...]], dict[int, Any]] = {}
        self.unmatched: list[str] = []

    def _match(self, name: str) -> tuple[int, int, dict[str, str]] | None:
        for index, patterns in self._patterns:
            for position, pattern in enumerate(patterns):
                found = pattern.fullmatch(name)
                if found:
                    return index, position, found.groupdict()
        return None

    def renamed(self, name: str) -> str | None:
        """The other side's name of ``name`` if its rule only renames it, else ``None``.

        Only renames: one tensor on each side, no transform (the tensor goes over as it is).
        """
        found = self._match(name)
        if found is None:
            return None
        index, _, values = found
        rule = self.rules[index]
        targets = getattr(rule, _OTHER[self.side])
        if rule.transform is not None or len(getattr(rule, self.side)) != 1 or len(targets) != 1:
            return None
        return str(targets[0].format(**values))

    def add(self, name: str, tensor: Any) -> list[tuple[str, Any]]:
        """The other side's tensors this one completes (none while its group waits)."""
        found = self._match(name)
        if found is None:
            self.unmatched.append(name)
            return []
        index, position, values = found
        rule = self.rules[index]
        key = (index, tuple(sorted(values.items())))
        group = self._groups.setdefault(key, {})
        group[position] = tensor
        if len(group) < len(getattr(rule, self.side)):
            return []
        del self._groups[key]
        tensors = [group[i] for i in range(len(group))]
        return self._convert(rule, values, tensors)

    def _convert(
        self, rule: WeightRule, values: dict[str, str], tensors: list[Any]
    ) -> list[tuple[str, Any]]:
        targets = [t.format(**values) for t in getattr(rule, _OTHER[self.side])]
        if not targets:
            return []
        if rule.transform is None:
            made = tensors
        elif self.side == "hf":
            made = rule.transform.to_plugtrain(tensors, self.context)
        else:
            made = rule.transform.to_hf(tensors, self.context)
        if len(made) != len(targets):
            message = (
                f"the transform of {getattr(rule, self.side)} made {len(made)} tensors for "
                f"{len(targets)} names"
            )
            raise ConversionError(message)
        return list(zip(targets, made, strict=True))

    def incomplete(self) -> list[str]:
        """The names of groups still waiting for a tensor (a checkpoint missing part of a rule)."""
        waiting: list[str] = []
        for (index, values), group in self._groups.items():
            names = getattr(self.rules[index], self.side)
            bound = dict(values)
            waiting.extend(n.format(**bound) for i, n in enumerate(names) if i not in group)
        return waiting

    def finish(self, drop_unmatched: bool, where: str) -> list[str]:
        """Check that every tensor was used; the names dropped (with ``drop_unmatched``).

        :raises ConversionError: naming the tensors no rule matched, or the names a rule still
            lacks.
        """
        waiting = self.incomplete()
        if waiting:
            raise ConversionError(f"{where}: incomplete: {_listed(waiting)} missing")
        if self.unmatched and not drop_unmatched:
            message = (
                f"{where}: no rule of the converter matches {_listed(self.unmatched)} "
                "(--drop-unmatched-keys converts the rest)"
            )
            raise ConversionError(message)
        return list(self.unmatched)


def _listed(names: Iterable[str], limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
