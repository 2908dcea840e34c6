"""Registered components where the core meets them: built from a spec, checked, put in a mode.

Building one component from its validated spec (nested ones first), the protocol checks where an
object a plugin built crosses into the core, the optimizer's evaluation mode, the rule of one
scheduler per param group and setting, an optimizer with its schedulers built from a run
file's mappings, and what a Trainer is given (settings, backend, optimizer, schedulers) made
into its parts.
"""

from __future__ import annotations

from plugtrain.train.components.building import build_component, takes_context
from plugtrain.train.components.conformity import check_built
from plugtrain.train.components.given import (
    as_list,
    backend_from,
    optimizer_from,
    schedulers_from,
    settings_from,
)
from plugtrain.train.components.optimization import (
    Optimization,
    build_optimization,
    group_factor_wrapper,
    optimizer_factory,
    scaled_per_group,
)
from plugtrain.train.components.optimizer_mode import evaluation_mode, training_mode
from plugtrain.train.components.scheduler_checks import check_scheduler_overlap

__all__ = [
    "Optimization",
    "as_list",
    "backend_from",
    "build_component",
    "build_optimization",
    "check_built",
    "check_scheduler_overlap",
    "evaluation_mode",
    "group_factor_wrapper",
    "optimizer_factory",
    "optimizer_from",
    "scaled_per_group",
    "schedulers_from",
    "settings_from",
    "takes_context",
    "training_mode",
]
