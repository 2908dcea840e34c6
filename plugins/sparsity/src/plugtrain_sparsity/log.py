"""``LogSparsity``: target and actual sparsity per parameter in the training metrics."""

from __future__ import annotations

import os

from plugtrain.protocols import TrainerView

__all__ = ["LogSparsity"]


class LogSparsity:
    """Adds ``sparsity/<name>/target`` and ``sparsity/<name>/actual`` to each logged record.

    For each group, ``<name>`` of the target is the common prefix of its parameter names
    followed by ``*`` and the value is the algorithm's ``target_sparsity()`` at this step; the
    actual sparsity is ``1 - mean(mask)`` of each parameter after this step's update, under its
    full name. Static groups are measured and named like the others (cstorch writes the
    configured level under ``*`` for every static group). Does nothing without sparsity or
    without an optimizer. Not a default callback (as in Model Zoo): list it under
    ``callbacks: [{LogSparsity: {}}]``.
    """

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Add the values to the record about to be logged."""
        sparsity = getattr(trainer, "sparsity", None)
        if sparsity is None or trainer.optimizer is None:
            return
        for group in sparsity.groups:
            names = [p.name for p in group.params]
            target = getattr(group.algorithm, "target_sparsity", None)
            if callable(target):
                prefix = os.path.commonprefix(names)  # noqa: RUF071 - by character, as cstorch
                metrics[f"sparsity/{prefix}*/target"] = float(target())
            for param in group.params:
                metrics[f"sparsity/{param.name}/actual"] = 1.0 - float(param.mask.float().mean())
