"""LogOptimizerParamGroup: values of the optimizer's param groups, into the training metrics."""

from __future__ import annotations

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_callbacks.schemas import LogOptimizerParamGroupArgs

__all__ = ["LogOptimizerParamGroup"]


class LogOptimizerParamGroup:
    """Adds ``<key>/<group index>`` for each key and param group to each logged training record.

    :param keys: the param-group keys (``lr``, ``momentum``, ``weight_decay`` ...); one or a list.
    """

    def __init__(self, keys: str | list[str]) -> None:
        checked = validated_arguments(
            LogOptimizerParamGroupArgs, {"keys": keys}, owner="LogOptimizerParamGroup"
        )
        keys = checked["keys"]
        self.keys: list[str] = [keys] if isinstance(keys, str) else list(keys)

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Refuse a key that no param group has."""
        groups = trainer.optimizer.param_groups
        present = {key for group in groups for key in group}
        missing = [key for key in self.keys if key not in present]
        if missing:
            message = (
                f"no param group has {', '.join(missing)}; the groups have: "
                f"{', '.join(sorted(k for k in present if k != 'params'))}"
            )
            raise ConfigError([ConfigIssue("LogOptimizerParamGroup.keys", message)])

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Add each group's values (numbers only; other values are not metrics)."""
        for index, group in enumerate(trainer.optimizer.param_groups):
            for key in self.keys:
                value = group.get(key)
                if isinstance(value, bool):
                    value = int(value)
                if isinstance(value, int | float):
                    metrics[f"{key}/{index}"] = float(value)
                elif isinstance(value, list | tuple):  # betas
                    for position, item in enumerate(value):
                        metrics[f"{key}/{index}/{position}"] = float(item)
