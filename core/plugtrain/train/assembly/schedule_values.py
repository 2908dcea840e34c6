"""The values of a scheduler without a closed form, found by stepping it on a throw-away optimizer.

``plugtrain plot`` draws closed forms without torch (:mod:`plugtrain.authoring.schedule_plot`);
a scheduler that has none (a plain torch ``LRScheduler``, a third party's stepped scheduler) is
built here on an optimizer of one-element parameters, one param group per tag it targets, and
stepped as a training loop would (``optimizer.step()`` then ``scheduler.step()``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from plugtrain.bases.scheduler import scheduler_key, scheduler_length
from plugtrain.registry.components import Registry
from plugtrain.train.components import build_component

__all__ = ["SteppedSchedule"]

EVERY_GROUP = "*"


class SteppedSchedule:
    """One scheduler built on its own throw-away optimizer.

    :param registry: where the scheduler's name (and its children's) resolve.
    :param spec: ``{Name: {arguments}}``.
    :param tags: the tags its ``param_group_tags`` name (``"*"``: it targets every group).
    :param initial: the groups' starting ``lr`` and ``weight_decay`` (a torch scheduler scales
        the optimizer's own value).
    """

    def __init__(
        self,
        registry: Registry,
        spec: Mapping[str, Any],
        tags: Sequence[str | None],
        initial: Mapping[str, float],
    ) -> None:
        self._rows: dict[str | None, int] = {}
        groups: list[dict[str, Any]] = [{"params": [torch.zeros(1, requires_grad=True)]}]
        self._rows[None] = self._rows[EVERY_GROUP] = 0
        for tag in tags:
            if isinstance(tag, str) and tag != EVERY_GROUP and tag not in self._rows:
                self._rows[tag] = len(groups)
                groups.append({"params": [torch.zeros(1, requires_grad=True)], "tags": tag})
        self.optimizer = torch.optim.SGD(
            groups, lr=float(initial.get("lr", 1.0)), weight_decay=initial.get("weight_decay", 0)
        )
        self.scheduler = build_component(registry, "scheduler", spec, self.optimizer)
        self.key = scheduler_key(self.scheduler)
        self.length = scheduler_length(self.scheduler)

    def sample(self, points: Sequence[int], tags: Sequence[str | None]) -> list[tuple[float, ...]]:
        """The values at ``points`` (in increasing order) in the group of each of ``tags``."""
        found: dict[int, list[float]] = {}
        rows = [self._rows[tag] for tag in tags]
        wanted = set(points)
        groups = self.optimizer.param_groups
        last = max(points, default=-1)
        for step in range(last + 1):
            if step:
                self.optimizer.step()  # no gradients: nothing moves, but torch sees a loop
                self.scheduler.step()
            if step in wanted:
                found[step] = [float(groups[row][self.key]) for row in rows]
        return [tuple(found[p][column] for p in points) for column in range(len(rows))]
