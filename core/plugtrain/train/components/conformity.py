"""Protocol checks where an object a plugin built crosses into the core.

:func:`check_built` runs on every component :func:`.building.build_component`
builds from the registry: a member missing from what the kind's protocol
(:mod:`plugtrain.protocols`) requires is reported at once as a
:class:`~plugtrain.errors.PluginContractError` naming the providing distribution and the API
version it declared, instead of an ``AttributeError`` deep inside the core that looks like
plugtrain's own bug. Callable curves of plugin API 1.0 are adapted, not refused
(:func:`plugtrain.curve.as_curve`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugtrain.bases.curve import as_curve
from plugtrain.errors import PluginContractError

if TYPE_CHECKING:
    from plugtrain.registry.components import Component

__all__ = ["REQUIRED_MEMBERS", "check_built"]

REQUIRED_MEMBERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "optimizer": (
        "Optimizer",
        ("param_groups", "step", "zero_grad", "state_dict", "load_state_dict"),
    ),
    "scheduler": ("Scheduler", ("optimizer", "step", "state_dict", "load_state_dict")),
    "logger": ("Logger", ("log_metrics", "close")),
    "sparsity": ("SparsityAlgorithm", ("initial_masks", "advance")),
}
"""Per kind: the protocol's name and the members the core calls without checking first."""


def _declared(component: Component) -> str:
    from plugtrain.discovery.loading import _declared_api

    versions = _declared_api(component.plugin.distribution)
    if not versions:
        return "no plugin API declared"
    return "written for plugin API " + ", ".join(versions)


def check_built(kind: str, built: Any, component: Component, where: str) -> None:
    """Check ``built`` (made by ``component``) against its kind's protocol.

    :param where: the run-file path of the component, for the message.
    :raises PluginContractError: naming the provider, its declared API and what is missing.
    """
    owner = f"{component.kind} {component.name!r} from {component.provider}"
    required = REQUIRED_MEMBERS.get(kind)
    if required is not None:
        protocol, members = required
        missing = [m for m in members if not hasattr(built, m)]
        if missing:
            message = (
                f"{where}: {owner} ({_declared(component)}) built a {type(built).__name__} "
                f"without {', '.join(missing)}, which plugtrain.protocols.{protocol} requires; "
                "this is the plugin's to fix"
            )
            raise PluginContractError(message)
    if kind == "optimizer":
        modes = [m for m in ("train", "eval") if callable(getattr(built, m, None))]
        if len(modes) == 1:
            message = (
                f"{where}: {owner} ({_declared(component)}) defines {modes[0]}() but not "
                f"{'eval' if modes[0] == 'train' else 'train'}(); the evaluation contract of "
                "plugtrain.protocols.Optimizer (plugin API 1.1) needs both"
            )
            raise PluginContractError(message)
    curve = getattr(built, "curve", None) if kind == "scheduler" else None
    if curve is not None and not (callable(curve) or hasattr(curve, "at")):
        as_curve(curve, f"{where}: {owner} ({_declared(component)})")  # raises, naming it
