"""The base class of backends, with the single-process defaults, and one backend type per process.

Every backend, built-in (``CPU``, ``GPU``, ``CSX``) or a third party's, meets
:class:`plugtrain.protocols.Backend`; subclassing :class:`BackendBase` is the short way to do so.
A subclass names its argument ``schema``, sets ``backend_type`` and ``device``, and overrides only
what differs from one process on one device. Nothing here imports torch.
"""

from __future__ import annotations

import abc
import inspect
import itertools
import logging
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from plugtrain.errors import BackendError
from plugtrain.registry.schema import bind_arguments, constructor_signature, validated_arguments

__all__ = [
    "BackendBase",
    "active_backend_type",
    "backend",
    "check_backend",
    "claim_backend_type",
    "missing_backend_members",
    "rebuild_dataloader",
    "release_backend_type",
]

log = logging.getLogger("plugtrain")

_lock = threading.Lock()
_active: str | None = None


def claim_backend_type(backend_type: str) -> None:
    """Record that a backend of ``backend_type`` exists in this process.

    :class:`BackendBase` calls this once the arguments are valid; other backends call it first.

    :raises BackendError: (a ``RuntimeError``) when a backend of another type already exists.
    """
    global _active  # noqa: PLW0603 - one backend type per process, by definition
    with _lock:
        if _active is not None and _active != backend_type:
            message = (
                "Cannot instantiate multiple backends. "
                f"A backend with type {_active} has already been instantiated."
            )
            raise BackendError(message)
        _active = backend_type


def active_backend_type() -> str | None:
    """The backend type instantiated in this process, if any."""
    return _active


def release_backend_type() -> None:
    """Forget the active backend type (for tests and for programs that tear down a backend)."""
    global _active  # noqa: PLW0603
    with _lock:
        _active = None


class _FirstBatches:
    """The first ``limit`` items of ``items`` on each pass (a length when ``items`` has one)."""

    def __init__(self, items: Iterable[Any], limit: int) -> None:
        self.items, self.limit = items, limit

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self.items, self.limit)

    def __len__(self) -> int:
        return min(len(self.items), self.limit)  # type: ignore[arg-type]


class BackendBase(abc.ABC):
    """A backend running one process on one device; subclasses change what differs.

    A subclass sets ``backend_type`` (its registered name) and ``schema`` (its attrs argument
    schema) and defines :attr:`device`. Its constructor then takes exactly the schema's
    arguments (the signature is derived from the schema, so the two cannot drift apart),
    validates them as a run file's are, claims the process's backend type, and stores each
    argument as an attribute of the same name (:meth:`configure` may do more). A subclass that
    needs its own ``__init__`` calls ``super().__init__(**arguments)``.

    The defaults: this process is the main one, nothing to check before a run, the model moved
    to :attr:`device`, the data as given (evaluation limited to its first ``max_batches``
    batches), sums as they are, nothing to release, and one process per machine.
    """

    backend_type: ClassVar[str] = ""
    schema: ClassVar[type | None] = None
    __signature__: ClassVar[inspect.Signature]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("schema") is not None and cls.__init__ is BackendBase.__init__:
            cls.__signature__ = constructor_signature(cls.schema)  # type: ignore[arg-type]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if cls.schema is None:
            message = f"{cls.__name__} must set a schema (its attrs argument schema)"
            raise TypeError(message)
        signature = cls.__dict__.get("__signature__") or constructor_signature(cls.schema)
        arguments = self.validate_arguments(bind_arguments(signature, args, kwargs))
        claim_backend_type(self.backend_type)
        self.configure(arguments)

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The given arguments checked against the schema, aliases renamed, defaults filled in.

        :raises ConfigError: naming every bad argument, as ``CPU.num_processes``.
        """
        assert self.schema is not None
        return validated_arguments(self.schema, arguments, owner=self.backend_type)

    def configure(self, arguments: Mapping[str, Any]) -> None:
        """Take the validated arguments: by default each becomes an attribute of its name."""
        for name, value in arguments.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        if self.schema is None:
            return f"{type(self).__name__}()"
        names = constructor_signature(self.schema).parameters
        shown = ", ".join(f"{n}={getattr(self, n, None)!r}" for n in names if n != "kwargs")
        return f"{type(self).__name__}({shown})"

    # -- the Backend protocol ----------------------------------------------------------------

    @property
    @abc.abstractmethod
    def device(self) -> Any:
        """The ``torch.device`` that models and batches are moved to."""

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints, metrics and logs: yes, on its own."""
        return True

    def check_runnable(self) -> None:  # noqa: B027 - a default, not an abstract method
        """Raise :class:`~plugtrain.errors.BackendError` if the run cannot start (here: never)."""

    def prepare_model(self, model: Any) -> Any:
        """The model on :attr:`device`."""
        return model.to(self.device)

    def prepare_dataloader(self, loader: Iterable[Any]) -> Iterable[Any]:
        """The training batches this process trains on: all of them."""
        return loader

    def prepare_eval_dataloader(self, loader: Iterable[Any], max_batches: int | None) -> Any:
        """The evaluation batches of this process: the first ``max_batches`` (all: ``None``)."""
        return loader if max_batches is None else _FirstBatches(loader, max_batches)

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Sums over every process: on one process, a copy."""
        return dict(sums)

    def close(self) -> None:  # noqa: B027 - a default, not an abstract method
        """Release what the backend holds at the end of a run: nothing here."""

    def configure_precision(self, settings: Any) -> None:
        """Take a Trainer's precision settings (optional member, see the Backend protocol).

        Autocast, loss scaling and clipping run in the Trainer; what is left for a backend is
        what only a compiler can use. Here that is nothing: a ``precision_opt_level`` is said
        to have no effect, once per backend.

        :param settings: a :class:`plugtrain.config.precision.PrecisionSettings`.
        """
        level = getattr(settings, "precision_opt_level", None)
        if level is not None and not getattr(self, "_precision_level_said", False):
            self._precision_level_said = True
            log.info(
                "precision: precision_opt_level %s is handed to the CSX compiler; it has no "
                "effect on the %s backend",
                level,
                self.backend_type,
            )

    @classmethod
    def processes_per_node(cls, arguments: Mapping[str, Any]) -> int:
        """How many processes ``plugtrain fit`` starts on this machine for ``arguments``: one."""
        return 1

    def apply_flags(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """Set Cerebras performance and debug flags (``csx.performance.micro_batch_size`` ...).

        Optional for a backend (callbacks look it up); the CSX backend hands the flags to the
        Cerebras stack. Returns the values the flags had (``None``: unset); applying those
        restores them. Here the flags have no effect, which is reported once per flag.
        """
        report_inactive_flags(self.backend_type, flags)
        return {}


SAMPLING_OPTIONS = frozenset({"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})
"""The DataLoader options that say which samples make a batch: the ones a rebuild replaces."""


def rebuild_dataloader(loader: Any, **changes: Any) -> Any:
    """A new ``torch.utils.data.DataLoader`` over ``loader``'s dataset, with every option kept.

    For a backend that shards a user's loader (``prepare_dataloader``) and for the Trainer's
    global sample order: every constructor option of ``loader`` other than the sampling ones
    (:data:`SAMPLING_OPTIONS`) is copied, read from the constructor's signature, so also those
    a later torch adds: ``num_workers``, ``collate_fn``, ``pin_memory``, ``timeout``,
    ``worker_init_fn``, ``multiprocessing_context``, ``generator`` (the same object: it seeds
    the workers, so they get the seeds the original loader would give them),
    ``prefetch_factor``, ``persistent_workers``, ``pin_memory_device``, ``in_order``.

    :param loader: a ``torch.utils.data.DataLoader`` (so torch is imported; this module is not).
    :param changes: the new sampling, ``sampler`` with ``batch_size`` and ``drop_last`` or a
        ``batch_sampler``, and any option to change.
    """
    data = sys.modules["torch.utils.data"]
    options = {
        name: getattr(loader, name)
        for name in inspect.signature(data.DataLoader).parameters
        if name != "dataset" and name not in SAMPLING_OPTIONS and hasattr(loader, name)
    }
    options.update(changes)
    return data.DataLoader(loader.dataset, **options)


_REPORTED_FLAGS: set[tuple[str, str]] = set()


def report_inactive_flags(backend_type: str, flags: Mapping[str, Any]) -> None:
    """Warn, once per backend type and flag, that ``csx.*`` flags do nothing on this backend."""
    new = [name for name in flags if (backend_type, name) not in _REPORTED_FLAGS]
    if not new:
        return
    _REPORTED_FLAGS.update((backend_type, name) for name in new)
    logging.getLogger("plugtrain").warning(
        "the flags %s only act on the CSX backend; on %s they have no effect",
        ", ".join(new),
        backend_type or "this backend",
    )


def missing_backend_members(backend: Any) -> list[str]:
    """The members of :class:`plugtrain.protocols.Backend` that ``backend`` lacks.

    Looked up without calling anything (a property such as ``device`` is not evaluated).
    """
    from plugtrain.contract.protocols import Backend

    missing = []
    for name in _protocol_members(Backend):
        try:
            inspect.getattr_static(backend, name)
        except AttributeError:
            missing.append(name)
    return missing


def _protocol_members(protocol: type) -> list[str]:
    """The public attributes and methods a protocol class declares, in order."""
    names = list(getattr(protocol, "__annotations__", {}))
    names += [n for n in vars(protocol) if not n.startswith("_") and n not in names]
    return names


def check_backend(backend: Any) -> None:
    """Raise :class:`~plugtrain.errors.BackendError` unless ``backend`` meets the protocol."""
    missing = missing_backend_members(backend)
    if missing:
        message = (
            f"{type(backend).__name__} is not a backend: it lacks {', '.join(missing)} of the "
            "Backend protocol (plugtrain.protocols.Backend); subclass "
            "plugtrain.backend_base.BackendBase, which provides the single-process defaults"
        )
        raise BackendError(message)


def backend(backend_type: str, **arguments: Any) -> Any:
    """Create a backend: ``plugtrain.backend("CSX", cluster_config=...)``.

    :param backend_type: ``"CPU"``, ``"GPU"``, ``"CSX"`` or any registered backend (any case).
    :param arguments: the backend's arguments (see ``plugtrain show CPU``).
    """
    from plugtrain.discovery.loading import get_registry

    return get_registry().resolve("backend", backend_type)(**arguments)
