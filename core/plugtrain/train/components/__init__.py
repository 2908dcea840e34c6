"""Registered components where the core meets them: built from a spec, checked, put in a mode.

Building one component from its validated spec (nested ones first), the protocol checks where an
object a plugin built crosses into the core, the optimizer's evaluation mode, and the rule of one
scheduler per param group and setting.
"""

from __future__ import annotations

from plugtrain.train.components.building import build_component, takes_context
from plugtrain.train.components.conformity import check_built
from plugtrain.train.components.optimizer_mode import evaluation_mode, training_mode
from plugtrain.train.components.scheduler_checks import check_scheduler_overlap

__all__ = [
    "build_component",
    "check_built",
    "check_scheduler_overlap",
    "evaluation_mode",
    "takes_context",
    "training_mode",
]
