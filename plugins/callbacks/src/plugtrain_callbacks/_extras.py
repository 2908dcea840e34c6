"""Optional dependencies: each logger's package, found without importing it (torch-free)."""

from __future__ import annotations

import importlib.util

from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["EXTRAS", "missing_extra", "require_extra"]

EXTRAS: dict[str, tuple[str, str]] = {
    "TensorBoardLogger": ("tensorboard", "tensorboard"),
    "WandbLogger": ("wandb", "wandb"),
    "MLflowLogger": ("mlflow", "mlflow"),
}
"""Per logger: the module it needs and the extra of plugtrain-callbacks that installs it."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is broken, or a blocked module
        return False


def missing_extra(logger: str) -> str | None:
    """Why ``logger`` cannot run here (its package is not installed), or ``None`` when it can."""
    module, extra = EXTRAS[logger]
    if _installed(module):
        return None
    return (
        f"{logger} needs the {module} package, which is not installed: "
        f"pip install plugtrain-callbacks[{extra}]"
    )


def require_extra(logger: str) -> None:
    """Raise :class:`~plugtrain.errors.ConfigError` naming the extra when it is missing."""
    problem = missing_extra(logger)
    if problem is not None:
        raise ConfigError([ConfigIssue(logger, problem)])
