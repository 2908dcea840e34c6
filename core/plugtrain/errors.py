"""The exceptions plugtrain raises.

Every error derives from :class:`PlugtrainError`. Where a caller would naturally catch a builtin
(``LookupError`` for a missing name, ``ValueError`` for a bad value, ``ImportError`` for a plugin
that cannot load), the specific error also derives from that builtin.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = [
    "BackendError",
    "CheckpointError",
    "CheckpointMismatchError",
    "ComponentError",
    "ComponentFailedError",
    "ConfigError",
    "ConfigIssue",
    "CorruptCheckpointError",
    "DuplicateNameError",
    "HyperParameterError",
    "HyperParameterTypeError",
    "MissingDependencyError",
    "ModelDirBusyError",
    "PluginLoadError",
    "PlugtrainError",
    "TrainingError",
    "UnknownNameError",
]


class PlugtrainError(Exception):
    """Base class of every error plugtrain raises on purpose."""


class UnknownNameError(PlugtrainError, LookupError):
    """A kind or a component name that no installed plugin provides."""


class DuplicateNameError(PlugtrainError, ValueError):
    """Two plugins provide the same (kind, name) and the user has not said which one to use."""


class PluginLoadError(PlugtrainError, ImportError):
    """A plugin failed to import, to register, or to pass validation (strict mode only)."""


class MissingDependencyError(PlugtrainError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class TrainingError(PlugtrainError, RuntimeError):
    """Training cannot go on (a non-finite loss, a model directory that cannot be written)."""


class BackendError(PlugtrainError, RuntimeError):
    """A backend cannot be created or cannot run here."""


class CheckpointError(PlugtrainError, OSError):
    """A checkpoint cannot be written, found or read."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is damaged (truncated, empty, a bad CRC) or holds non-finite weights.

    Resuming from the newest checkpoint skips such a file, with a warning, for an older one.
    """


class CheckpointMismatchError(CheckpointError):
    """A sound checkpoint that does not fit this run (another model shape, another optimizer)."""


class ModelDirBusyError(TrainingError):
    """Another process is fitting into the same model directory."""


class ComponentFailedError(TrainingError):
    """A callback or logger raised while the Trainer called it (not the model's own code).

    :param owner: the callback or logger object.
    :param hook: the method that raised (``on_train_step_end``, ``log_metrics`` ...).
    """

    def __init__(self, message: str, owner: object = None, hook: str = "") -> None:
        super().__init__(message)
        self.owner = owner
        self.hook = hook


class PluginContractError(PlugtrainError, TypeError):
    """An object a plugin built does not meet its protocol (:mod:`plugtrain.protocols`).

    Raised where the object crosses into the core, naming the providing distribution and what
    it lacks, so that the mismatch is blamed on its provider rather than on plugtrain.
    """


class ComponentError(PlugtrainError, RuntimeError):
    """A plugin's own code raised while plugtrain ran it (``fit``, ``plot`` ...).

    The message names the plugin's distribution and, where it can be told, the component; the
    original exception is the ``__cause__``. See :mod:`plugtrain.discovery.attribution`.
    """


@attrs.frozen
class ConfigIssue:
    """One problem found in a configuration: where it is and what is wrong.

    :param path: dotted path of the offending value, e.g. ``trainer.init.optimizer.SGD.lr``.
    :param message: what is wrong, in one sentence.
    :param location: ``file:line:column`` when the value came from a file, else ``None``.
    """

    path: str
    message: str
    location: str | None = None

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        # A key of blanks (or with blanks around it) would print as nothing: quoted, it stays
        # visible. Names with inner blanks ("AdamW param group 0.lr") read fine as they are.
        blank = any(part != part.strip() or not part for part in self.path.split("."))
        path = repr(self.path) if self.path and blank else self.path
        what = f"{path}: " if self.path else ""
        return f"{where}{what}{self.message}"


class ConfigError(PlugtrainError, ValueError):
    """A configuration (a run file or arguments given in Python) has one or more problems.

    :param issues: every problem found; all are reported at once.
    """

    def __init__(self, issues: Sequence[ConfigIssue] | str) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue("", issues)]
        self.issues: list[ConfigIssue] = list(issues)
        super().__init__(self._render())

    def _render(self) -> str:
        if len(self.issues) == 1:
            return str(self.issues[0])
        lines = [f"{len(self.issues)} problems in the configuration:"]
        lines += [f"  {issue}" for issue in self.issues]
        return "\n".join(lines)


class HyperParameterError(PlugtrainError, ValueError):
    """A schedule or an update schedule that cannot be built.

    :param message: what is wrong.
    :param key: the key of the mapping the message is about (``"type"``, ``"freq"`` ...), or
        ``None`` when it is about the value as a whole.
    :param unknown_key: ``key`` itself is wrong (an unknown argument), not its value.
    """

    def __init__(self, message: str, key: str | None = None, *, unknown_key: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.unknown_key = unknown_key


class HyperParameterTypeError(HyperParameterError, TypeError):
    """A :class:`HyperParameterError` that cstorch raises as ``TypeError`` (an unknown argument)."""
