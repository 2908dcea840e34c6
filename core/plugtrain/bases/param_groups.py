"""Parameter tagging: glob filters on parameter names turn a model into tagged param groups.

Model Zoo's behaviour: a filter ``{"params": GLOB or [GLOB, ...], "tag": NAME}``
matches a parameter when a glob matches its whole name or any dot-suffix of it (``fc1.weight``
matches ``model.fc1.weight``; ``*`` also crosses dots; case-sensitive). Parameters are grouped by
the *set* of tags they collect, one group per distinct set, in order of first appearance;
untagged parameters form a group without a ``tags`` key.

Torch-free: this module works on anything with ``named_parameters()`` or on ``(name, tensor)``
pairs, and only reads ``requires_grad``, ``ndim`` and ``shape`` from the tensors.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from plugtrain.bases.scheduler import EXCLUDED_FROM_DECAY
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = [
    "MODEL_ZOO_LR_ADJUSTMENT_GROUPS",
    "adjust_learning_rate_groups",
    "build_param_groups",
    "configure_param_groups",
    "model_learning_rate_factors",
    "name_matches",
    "partition_params_group_with_tags",
]

_FILTER_KEYS = ("params", "tag")

NORM_LAYER_NAMES = ("norm", "bn", "ln")
"""Name parts that mark a normalisation layer (``layer_norm``, ``bn1``, ``ln_f``...)."""


def name_matches(pattern: str, name: str) -> bool:
    """Whether ``pattern`` matches ``name`` or one of its dot-suffixes (case-sensitive)."""
    parts = name.split(".")
    return any(fnmatch.fnmatchcase(".".join(parts[i:]), pattern) for i in range(len(parts)))


def _named(model_or_named_params: Any) -> list[tuple[str, Any]]:
    named = getattr(model_or_named_params, "named_parameters", None)
    items = list(named() if callable(named) else model_or_named_params)
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], str)):
            message = (
                "parameter tagging needs parameter names: pass the model or "
                "model.named_parameters(), not model.parameters() (got an item of type "
                f"{type(item).__name__})"
            )
            raise ConfigError([ConfigIssue("params", message)])
    return [(name, p) for name, p in items if getattr(p, "requires_grad", True)]


def _filters(spec: Any) -> list[tuple[tuple[str, ...], str]]:
    """Normalise ``{"params": [...]}``, a list of filters, or one filter; check each one."""
    if (
        isinstance(spec, Mapping)
        and set(spec) == {"params"}
        and not isinstance(spec["params"], str)
    ):
        spec = spec["params"]
    if isinstance(spec, Mapping):
        spec = [spec]
    filters = []
    for i, item in enumerate(spec or []):
        where = f"params[{i}]"
        if not isinstance(item, Mapping):
            message = f"a filter is a mapping {{params: GLOB, tag: NAME}}, got {item!r}"
            raise ConfigError([ConfigIssue(where, message)])
        unknown = sorted(set(item) - set(_FILTER_KEYS))
        if unknown:
            message = f"unknown filter key(s) {unknown}; a filter has only 'params' and 'tag'"
            raise ConfigError([ConfigIssue(where, message)])
        if "tag" not in item or not isinstance(item["tag"], str):
            message = f"a filter needs a string 'tag', got {item.get('tag')!r}"
            raise ConfigError([ConfigIssue(f"{where}.tag", message)])
        globs = item.get("params")
        globs = (globs,) if isinstance(globs, str) else globs
        if (
            not isinstance(globs, list | tuple)
            or not globs
            or not all(isinstance(g, str) for g in globs)
        ):
            message = f"'params' must be a glob or a list of globs, got {item.get('params')!r}"
            raise ConfigError([ConfigIssue(f"{where}.params", message)])
        filters.append((tuple(globs), item["tag"]))
    return filters


def _tag_sets(
    named: Sequence[tuple[str, Any]], filters: Sequence[tuple[tuple[str, ...], str]]
) -> list[frozenset[str]]:
    tags: list[set[str]] = [set() for _ in named]
    for i, (globs, tag) in enumerate(filters):
        hits = [j for j, (name, _) in enumerate(named) if any(name_matches(g, name) for g in globs)]
        if not hits:
            message = f"filter {list(globs)!r} (tag {tag!r}) matches no trainable parameter"
            raise ConfigError([ConfigIssue(f"params[{i}].params", message)])
        for j in hits:
            tags[j].add(tag)
    return [frozenset(t) for t in tags]


def partition_params_group_with_tags(
    model_or_named_params: Any, param_filters: Any
) -> list[dict[str, Any]]:
    """Param groups of the trainable parameters, one per distinct set of tags.

    :param model_or_named_params: a module, or ``(name, tensor)`` pairs (``named_parameters()``).
    :param param_filters: ``{"params": [filter, ...]}`` (Model Zoo's shape), a list of filters,
        or a single filter ``{"params": GLOB or [GLOB, ...], "tag": NAME}``.
    :returns: groups ``{"params": [tensors], "param_names": [names], "tags": {tags}}`` in order
        of first appearance; the untagged group has no ``tags`` key.
    :raises ConfigError: (a ``ValueError``) for bare tensors, a filter that matches nothing,
        lacks ``tag`` or carries an unknown key.
    """
    named = _named(model_or_named_params)
    sets = _tag_sets(named, _filters(param_filters))
    groups: dict[frozenset[str], dict[str, Any]] = {}
    for (name, param), tags in zip(named, sets, strict=True):
        group = groups.get(tags)
        if group is None:
            group = groups[tags] = {"params": [], "param_names": []}
            if tags:
                group["tags"] = set(tags)
        group["params"].append(param)
        group["param_names"].append(name)
    return list(groups.values())


def _no_decay(name: str, param: Any, norm_modules: frozenset[str]) -> bool:
    """Bias and normalisation-layer parameters: Model Zoo excludes them from weight decay."""
    owner = name.rpartition(".")[0]
    if name.endswith("bias") or owner in norm_modules:
        return True
    return getattr(param, "ndim", 2) <= 1 and any(
        part in owner.lower() for part in NORM_LAYER_NAMES
    )


def _norm_modules(model: Any) -> frozenset[str]:
    named_modules = getattr(model, "named_modules", None)
    if not callable(named_modules):
        return frozenset()
    found = set()
    for name, module in named_modules():
        kind = type(module).__name__
        if "Norm" in kind:  # LayerNorm, BatchNorm*d, GroupNorm, RMSNorm, InstanceNorm*d
            found.add(name)
    return frozenset(found)


def configure_param_groups(
    groups: Iterable[Mapping[str, Any]],
    *,
    exclude_from_weight_decay: bool = True,
    model: Any = None,
) -> list[dict[str, Any]]:
    """Split each group's bias and normalisation parameters into a ``weight_decay: 0`` twin.

    A parameter is excluded from weight decay when its name ends in ``bias``, when it belongs
    to a module whose class name contains ``Norm`` (given ``model``), or when it is 0-D/1-D and
    its module's name contains ``norm``, ``bn`` or ``ln``. The twin is marked
    ``weight_decay_excluded: True`` (:data:`plugtrain.scheduler.EXCLUDED_FROM_DECAY`), which
    weight-decay schedulers leave alone. Tags and other keys are kept; empty groups are dropped.
    Groups without ``param_names`` are passed through unchanged.

    :param exclude_from_weight_decay: ``False`` returns the groups unchanged (copied).
    :param model: the module, to recognise normalisation layers by type.
    """
    norm_modules = _norm_modules(model) if model is not None else frozenset()
    result: list[dict[str, Any]] = []
    for group in groups:
        names = group.get("param_names")
        if not exclude_from_weight_decay or names is None:
            result.append(dict(group))
            continue
        keep: dict[str, Any] = {**group, "params": [], "param_names": []}
        drop: dict[str, Any] = {**group, "params": [], "param_names": [], "weight_decay": 0.0}
        drop[EXCLUDED_FROM_DECAY] = True  # weight-decay schedulers leave it alone
        for name, param in zip(names, group["params"], strict=True):
            target = drop if _no_decay(name, param, norm_modules) else keep
            target["params"].append(param)
            target["param_names"].append(name)
        result.extend(g for g in (keep, drop) if g["params"])
    return result


def build_param_groups(
    model: Any, params_filters: Any = None, exclude_from_weight_decay: bool = True
) -> list[dict[str, Any]]:
    """The param groups a Trainer hands to an optimizer from the YAML ``params:`` filters.

    Tags the model's trainable parameters (no filters: one untagged group), then applies
    :func:`configure_param_groups`. Each group holds tensors under ``params`` and their names
    under ``param_names``, plus ``tags`` where tagged and ``weight_decay: 0`` where excluded.
    """
    groups = partition_params_group_with_tags(model, params_filters or [])
    return configure_param_groups(
        groups, exclude_from_weight_decay=exclude_from_weight_decay, model=model
    )


MODEL_ZOO_LR_ADJUSTMENT_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": ("*embedding*weight",),
    "decoder_kernel": ("*decoder*dense*weight", "*decoder*linear*weight"),
}
"""Model Zoo's lr adjustment groups for a model that defines no ``lr_adjustment_groups``."""


def _lr_patterns(key: str, model: Any) -> tuple[tuple[str, ...], bool]:
    """The globs an ``adjust_learning_rate`` key stands for, and whether they are globs.

    A group name of the model (``model.lr_adjustment_groups``: name -> glob or globs) or one of
    Model Zoo's defaults (:data:`MODEL_ZOO_LR_ADJUSTMENT_GROUPS`); otherwise the key itself: a
    glob when it holds ``*``, ``?`` or ``[``, else a part of the parameter's name.
    """
    own = getattr(model, "lr_adjustment_groups", None)
    if isinstance(own, Mapping) and key in own:
        found = own[key]
        found = getattr(found, "patterns", found)
        return ((found,) if isinstance(found, str) else tuple(found or ())), True
    if key in MODEL_ZOO_LR_ADJUSTMENT_GROUPS:
        return MODEL_ZOO_LR_ADJUSTMENT_GROUPS[key], True
    return (key,), any(c in key for c in "*?[")


def model_learning_rate_factors(model: Any) -> tuple[tuple[str, float], ...]:
    """The model's own ``(key, factor)`` pairs: its optional ``learning_rate_factors()``.

    Keys are read as ``adjust_learning_rate`` keys are (see :func:`adjust_learning_rate_groups`);
    a model without the method, or returning an empty mapping, has none.
    """
    method = getattr(model, "learning_rate_factors", None)
    if not callable(method):
        return ()
    return tuple((str(key), float(factor)) for key, factor in method().items())


def adjust_learning_rate_groups(
    groups: Iterable[Mapping[str, Any]],
    factors: Sequence[tuple[str, float]],
    model: Any = None,
    defaults: Sequence[tuple[str, float]] = (),
) -> tuple[list[dict[str, Any]], list[str]]:
    """Split each group by the learning-rate factor of its parameters (Model Zoo's muP groups).

    Each group becomes one group per factor, marked ``adjust_learning_rate: factor`` (1.0 for
    parameters no key matches), in order of first appearance, other keys kept. The factor
    multiplies the group's learning rate: the schedulers' value through ``ScalePerParamLR``, or
    the optimizer's ``lr`` when no scheduler sets it.

    :param factors: ``(key, factor)`` pairs; a key is an lr adjustment group name, a glob on the
        full parameter name, or a part of the name (``decoder`` matches ``decoder.fc1.weight``).
    :param defaults: pairs of the same form (the model's own, :func:`model_learning_rate_factors`)
        for the parameters that no key of ``factors`` matches.
    :returns: the groups, and the keys of ``factors`` that matched no parameter.
    :raises ConfigError: a parameter matched by two keys with different factors.
    """
    written = [(key, factor, *_lr_patterns(key, model)) for key, factor in factors]
    fallback = [(key, factor, *_lr_patterns(key, model)) for key, factor in defaults]
    used: set[str] = set()
    result: list[dict[str, Any]] = []
    for group in groups:
        names = group.get("param_names")
        if names is None:
            message = "adjust_learning_rate needs param groups with parameter names"
            raise ConfigError([ConfigIssue("adjust_learning_rate", message)])
        split: dict[float, dict[str, Any]] = {}
        for name, param in zip(names, group["params"], strict=True):
            hits = _hits(name, written)
            used.update(key for key, _ in hits)
            hits = hits or _hits(name, fallback)
            factor = hits[0][1] if hits else 1.0
            target = split.get(factor)
            if target is None:
                target = split[factor] = {**group, "params": [], "param_names": []}
                target["adjust_learning_rate"] = factor
            target["params"].append(param)
            target["param_names"].append(name)
        result.extend(split.values())
    unused = [key for key, _ in factors if key not in used]
    return result, unused


def _hits(
    name: str, patterns: Sequence[tuple[str, float, tuple[str, ...], bool]]
) -> list[tuple[str, float]]:
    """The ``(key, factor)`` pairs whose globs match ``name``; all of one factor."""
    hits = [
        (key, factor)
        for key, factor, globs, is_glob in patterns
        if any(fnmatch.fnmatchcase(name, g) if is_glob else g in name for g in globs)
    ]
    if len({factor for _, factor in hits}) > 1:
        keys = ", ".join(f"{k} ({f:g})" for k, f in hits)
        message = f"parameter {name} is matched by several factors: {keys}"
        raise ConfigError([ConfigIssue("adjust_learning_rate", message)])
    return hits
