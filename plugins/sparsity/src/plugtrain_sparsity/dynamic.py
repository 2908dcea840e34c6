"""What GMP, SET and RigL share: a step counter, an update schedule and a sparsity schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from plugtrain.hyperparams import HyperParameterSchedule, make_schedule, make_update_schedule
from plugtrain_sparsity.init import make_init_method
from plugtrain_sparsity.masks import Balance

__all__ = ["DynamicSparsity"]


class DynamicSparsity:
    """A mask that changes at update steps (cstorch's ``DynamicSparsityAlgorithm``).

    ``step`` counts finished training steps. After each, the step is an update step when the
    update schedule says so (``freq``/``start``/``stop`` or ``steps``) and the optimizer
    applied it; then :meth:`update_mask` computes each parameter's new mask at the level
    ``clamp(sparsity(step), 0, 1)``. When step 0 is not an update step the masks start all
    true (training is dense until the first update), whatever ``init_method`` says.

    :param params: the group's ``(name, parameter)`` pairs.
    :param sparsity: the level: a number, a list (cycling) or a schedule mapping.
    :param init_method: ``random``, ``topk``, ``from_zeros``, ``checkerboard`` or a callable.
    :param update: ``{freq, start, stop}`` or ``{steps: [...]}``; ``None``: every step.
    """

    needs_gradients = False

    def __init__(
        self,
        params: Sequence[tuple[str, torch.Tensor]],
        sparsity: Any,
        init_method: Any = "random",
        update: Any = None,
    ) -> None:
        self.params = list(params)
        self.sparsity = make_schedule(sparsity)
        self.update_schedule = make_update_schedule(update)
        self.init_method = make_init_method(init_method)
        self.step = 0
        self._applied: float | None = None  # the level the masks were last set to

    # -- what each algorithm defines -------------------------------------------------------------

    def balance(self, name: str, param: torch.Tensor) -> Balance:
        """How ``param`` is split into groups (RigL's balancing; else one group)."""
        return Balance()

    def update_mask(
        self,
        name: str,
        param: torch.Tensor,
        mask: torch.Tensor,
        sparsity: float,
        gradient: torch.Tensor | None,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """The new mask of one parameter at an update step."""
        raise NotImplementedError

    def schedules(self) -> dict[str, HyperParameterSchedule]:
        """The schedules, by argument name, advanced on update steps and saved in checkpoints."""
        return {"sparsity": self.sparsity}

    # -- the protocol ----------------------------------------------------------------------------

    def level(self, step: int) -> float:
        """The sparsity at ``step``, clamped to ``[0, 1]``."""
        return min(max(float(self.sparsity(step)), 0.0), 1.0)

    def initial_masks(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """All true when step 0 is no update step; else ``init_method`` at ``sparsity(0)``."""
        if not self.update_schedule(0):
            return {name: torch.ones_like(p, dtype=torch.bool) for name, p in self.params}
        level = self._applied = self.level(0)
        masks = {
            name: self.init_method(param, level, self.balance(name, param), generator)
            for name, param in self.params
        }
        self.sparsity.update(True)  # a cycling level moves on once when training starts sparse
        return masks

    def advance(self, stepped: bool) -> bool:
        """Count the step; whether it is an update step (never when it was not applied)."""
        self.step += 1
        due = bool(self.update_schedule(self.step)) and stepped
        if not due:
            for schedule in self.schedules().values():
                schedule.update(False)
        return due

    def update_masks(
        self,
        masks: Mapping[str, torch.Tensor],
        gradients: Mapping[str, torch.Tensor] | None,
        generator: torch.Generator,
    ) -> dict[str, torch.Tensor]:
        """Each parameter's :meth:`update_mask` at this step's level; schedules move on.

        As in cstorch, a parameter without a gradient this step (unused by the forward) keeps
        its mask.
        """
        level = self._applied = self.level(self.step)
        new = {}
        with torch.no_grad():
            for name, param in self.params:
                if param.grad is None:
                    continue
                gradient = gradients.get(name) if gradients is not None else None
                new[name] = self.update_mask(name, param, masks[name], level, gradient, generator)
        for schedule in self.schedules().values():
            schedule.update(True)
        return new

    def target_sparsity(self) -> float:
        """The clamped sparsity schedule at the current step.

        A schedule that moves on at update steps (``cycling``) has moved on already after an
        update; its target is the level it was last applied at.
        """
        if self._applied is not None and self.sparsity.state_dict():
            return self._applied
        return self.level(self.step)

    def state_dict(self) -> dict[str, Any]:
        """``{"step": tensor, "sparsity": {first param: schedule state}}`` (cstorch's shape).

        Only schedules with state appear (a cycling one's ``index``); ``drop_fraction`` is saved
        the same way, which cstorch does not do.
        """
        state: dict[str, Any] = {"step": torch.tensor(self.step)}
        first = self.params[0][0] if self.params else ""
        for key, schedule in self.schedules().items():
            saved = schedule.state_dict()
            if saved or key == "sparsity":
                state[key] = {first: saved} if saved else {}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the step and the schedules' positions (cstorch drops the latter: fixed)."""
        self.step = int(state["step"])
        for key, schedule in self.schedules().items():
            saved = state.get(key) or {}
            if saved:
                schedule.load_state_dict(next(iter(saved.values())))
