"""Model Zoo's ``LoraConfig``: the keys of one ``lora_params`` group and its defaults (torch-free).

``lora_params`` is one mapping or a list of them; a layer takes the first group whose
``target_modules`` it matches. Keys and defaults are Model Zoo's: ``r: 0`` (no adapter: nothing
trains), ``alpha: 1``, ``dropout: 0.0``, ``fan_in_fan_out: false``, ``merge_weights: false``,
``target_modules: null`` (every Linear and Embedding).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["LORA_KEYS", "LoraConfig", "config_problems", "lora_configs"]


@attrs.frozen
class LoraConfig:
    """One group of LoRA settings (Model Zoo's ``LoraConfig`` dataclass)."""

    r: int = 0
    """The adapters' rank; 0 adds no adapter."""
    alpha: float = 1.0
    """The update is scaled by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapter's input (Linear layers only)."""
    fan_in_fan_out: bool = False
    """Weights stored ``[in, out]`` (GPT-2's Conv1D); plugtrain's layers store ``[out, in]``."""
    merge_weights: bool = False
    """``eval()`` folds the update into the weight, ``train()`` takes it out again."""
    target_modules: tuple[str, ...] | None = None
    """Class names or module-name globs that must all match; ``None``: every layer."""

    @property
    def scaling(self) -> float:
        """``alpha / r`` (0 without an adapter)."""
        return self.alpha / self.r if self.r > 0 else 0.0


LORA_KEYS = tuple(field.name for field in attrs.fields(LoraConfig))
"""The keys a ``lora_params`` group accepts."""


def _group_problems(group: Any) -> Iterator[str]:
    if not isinstance(group, Mapping):
        yield f"must be a mapping of {', '.join(LORA_KEYS)}, got {type(group).__name__}"
        return
    for key in group:
        if key not in LORA_KEYS:
            yield f"unknown key {key!r}; a LoRA group takes {', '.join(LORA_KEYS)}"
    r, alpha, dropout = group.get("r", 0), group.get("alpha", 1.0), group.get("dropout", 0.0)
    if not isinstance(r, int) or isinstance(r, bool) or r < 0:
        yield f"r must be an integer >= 0, got {r!r}"
    if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not math.isfinite(alpha):
        yield f"alpha must be a finite number, got {alpha!r}"
    elif alpha == 0 and isinstance(r, int) and r > 0:
        yield (
            "alpha must not be 0: the update is scaled by alpha / r, so the adapters would get "
            "no gradient and nothing would train; set alpha (Model Zoo's default is 1, twice r "
            "is usual)"
        )
    if not isinstance(dropout, int | float) or isinstance(dropout, bool) or not 0 <= dropout < 1:
        yield f"dropout must be a number in [0, 1), got {dropout!r}"
    for key in ("fan_in_fan_out", "merge_weights"):
        if not isinstance(group.get(key, False), bool):
            yield f"{key} must be true or false, got {group[key]!r}"
    if group.get("fan_in_fan_out", False):
        yield (
            "fan_in_fan_out: true is for weights stored [in, out] (GPT-2's Conv1D); "
            "plugtrain's Linear layers store [out, in], so leave it false"
        )
    targets = group.get("target_modules")
    if targets is not None and (
        not isinstance(targets, list | tuple)
        or not targets
        or not all(isinstance(t, str) and t for t in targets)
    ):
        yield f"target_modules must be null or a non-empty list of names, got {targets!r}"


def config_problems(lora_params: Any) -> list[str]:
    """What is wrong with ``lora_params`` as written (empty: nothing)."""
    groups = lora_params if isinstance(lora_params, list | tuple) else [lora_params]
    if not groups:
        return ["lora_params must be a mapping or a non-empty list of mappings"]
    problems: list[str] = []
    for index, group in enumerate(groups):
        where = f"group {index}: " if isinstance(lora_params, list | tuple) else ""
        problems.extend(where + problem for problem in _group_problems(group))
    if not problems and all(group.get("r", 0) == 0 for group in groups):
        problems.append(
            "r is 0 in every group (Model Zoo's default): no adapter is added and every other "
            "parameter is frozen, so nothing would train; set r (8 or 16 is usual)"
        )
    return problems


def lora_configs(lora_params: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[LoraConfig]:
    """The groups of ``lora_params`` (a mapping or a list of them), defaults filled in.

    :raises ValueError: naming what is wrong (see :func:`config_problems`), ``r: 0`` aside.
    """
    groups: list[Mapping[str, Any]] = (
        list(lora_params) if isinstance(lora_params, list | tuple) else [lora_params]  # type: ignore[list-item]
    )
    problems = [p for p in config_problems(lora_params) if not p.startswith("r is 0")]
    if problems:
        raise ValueError("lora_params: " + "; ".join(problems))
    configs = []
    for group in groups:
        values: dict[str, Any] = {**group}
        targets = values.get("target_modules")
        values["target_modules"] = tuple(targets) if targets is not None else None
        values["alpha"] = float(values.get("alpha", 1.0))
        values["dropout"] = float(values.get("dropout", 0.0))
        configs.append(LoraConfig(**values))
    return configs
