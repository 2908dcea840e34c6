"""The kinds of component plugtrain resolves by name, and facts about each kind."""

from __future__ import annotations

import attrs

__all__ = ["KINDS", "Kind", "kind_named"]


@attrs.frozen
class Kind:
    """One kind of component.

    :param name: singular, as used in ``resolve(kind, name)``: ``"optimizer"``.
    :param hook: the hook through which plugins register components of this kind.
    :param distribution: the distribution that ships plugtrain's own components of this kind.
    :param context_args: leading constructor parameters that the caller supplies and that are
        therefore absent from the schema (``params`` for an optimizer).
    :param defaults: components of this kind that every trainer has unless a run file removes
        them with ``Name: null`` (the default loggers, the default ``Throughput`` callback).
    :param plural_name: the plural for messages when it is not the name plus ``s``.
    """

    name: str
    hook: str
    distribution: str
    context_args: tuple[str, ...]
    defaults: tuple[str, ...] = ()
    plural_name: str = ""

    @property
    def plural(self) -> str:
        """The kind's plural, for messages."""
        return self.plural_name or self.name + "s"


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("optimizer", "plugtrain_register_optimizers", "plugtrain-optimizers", ("params",)),
        Kind("scheduler", "plugtrain_register_schedulers", "plugtrain-schedulers", ("optimizer",)),
        Kind("backend", "plugtrain_register_backends", "plugtrain-backends", ()),
        Kind("model", "plugtrain_register_models", "plugtrain", ()),
        Kind("dataloader", "plugtrain_register_dataloaders", "plugtrain", ()),
        Kind(
            "callback", "plugtrain_register_callbacks", "plugtrain-callbacks", (), ("Throughput",)
        ),
        Kind(
            "logger",
            "plugtrain_register_loggers",
            "plugtrain-callbacks",
            (),
            ("ProgressLogger", "MetricsFilesLogger"),
        ),
        Kind(
            "sparsity",
            "plugtrain_register_sparsity",
            "plugtrain-sparsity",
            ("params",),
            plural_name="sparsity algorithms",
        ),
        Kind(
            "sparsity_schedule",
            "plugtrain_register_sparsity_schedules",
            "plugtrain",
            (),
            plural_name="sparsity schedule types",
        ),
        Kind(
            "checkpoint_converter",
            "plugtrain_register_checkpoint_converters",
            "plugtrain-models",
            (),
        ),
    )
}
"""Every kind, by name, in the order hooks are called."""


def kind_named(name: str) -> Kind:
    """The :class:`Kind` called ``name`` (case-insensitive; plural accepted).

    :raises UnknownNameError: naming the known kinds and the closest match.
    """
    key = name.lower() if isinstance(name, str) else name
    if key in KINDS:
        return KINDS[key]
    if isinstance(key, str) and key.endswith("s") and key[:-1] in KINDS:
        return KINDS[key[:-1]]
    from plugtrain.errors import UnknownNameError
    from plugtrain.registry._suggest import did_you_mean

    hint = did_you_mean(str(name), KINDS)
    message = f"Unknown kind {name!r}.{hint} Kinds: {', '.join(KINDS)}."
    raise UnknownNameError(message)
