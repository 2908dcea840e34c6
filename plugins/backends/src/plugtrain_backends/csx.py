"""The CSX backend: validates a Cerebras cluster configuration and hands runs to cerebras.pytorch.

Importing this module does not import torch or the Cerebras stack; ``plugtrain.ClusterConfig``
is this module's :class:`ClusterConfig`, found through the registry.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import Any

from plugtrain.backend_base import BackendBase
from plugtrain.errors import BackendError, ConfigError, ConfigIssue
from plugtrain.schema import validated_arguments
from plugtrain_backends.schemas import ClusterConfig, CSXArgs

__all__ = ["CSXBackend", "ClusterConfig"]

CEREBRAS_MODULE = "cerebras.pytorch"

log = logging.getLogger("plugtrain")


class CSXBackend(BackendBase):
    """Runs on a Cerebras CS-X cluster. Creating it claims the process's backend type, ``CSX``.

    The whole configuration is validated here and can be changed between Trainers
    (``backend.cluster_config.num_csx = 2``). Running needs the Cerebras software stack
    (``cerebras.pytorch``) and a cluster: a Trainer on this backend builds cstorch's own CSX
    backend from this configuration and compiles the model through it; without the stack it
    stops with a :class:`~plugtrain.errors.BackendError` before any work starts.

    The constructor's signature is derived from :class:`~plugtrain_backends.schemas.CSXArgs`.

    :param artifact_dir: where the backend writes its artifacts.
    :param compile_dir: where compiled artifacts go on the cluster.
    :param compile_only: compile, do not train.
    :param validate_only: validate that the model compiles, do not compile.
    :param cluster_config: a :class:`ClusterConfig` or a mapping of its fields.
    """

    backend_type = "CSX"
    compiles_precision = True
    """The Cerebras compiler applies the precision settings (the Trainer does not autocast)."""
    cluster_logging = True
    """It acts on ``logging.wsc_log_level`` and ``logging.enable_act_frequency``."""
    schema = CSXArgs
    ClusterConfig = ClusterConfig
    """The cluster configuration class (``plugtrain.distributed.ClusterConfig``)."""
    artifact_dir: str | None
    compile_dir: str | None
    compile_only: bool
    validate_only: bool

    def validate_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments checked; ``cluster_config`` may also be a :class:`ClusterConfig`."""
        rest = dict(arguments)
        config = rest.pop("cluster_config", None)
        checked = validated_arguments(CSXArgs, rest, owner="CSX")
        checked["cluster_config"] = _as_cluster_config(config)
        return checked

    def configure(self, arguments: Mapping[str, Any]) -> None:
        """Store the settings; cstorch's backend is built when a Trainer starts."""
        super().configure(arguments)
        self.cstorch_backend: Any = None
        """cstorch's backend, built from this configuration when a Trainer starts."""
        self.precision: Any = None
        """The Trainer's precision settings, handed to cstorch (see configure_precision)."""
        self.flags: dict[str, Any] = {}
        """The ``csx.*`` flags set through :meth:`apply_flags`, by dotted name."""

    def __repr__(self) -> str:
        return (
            f"CSXBackend(compile_only={self.compile_only!r}, "
            f"validate_only={self.validate_only!r}, cluster_config={self.cluster_config!r})"
        )

    @property
    def cluster_config(self) -> ClusterConfig:
        """The cluster configuration; its fields may be changed between Trainers."""
        return self._cluster_config

    @cluster_config.setter
    def cluster_config(self, value: ClusterConfig | Mapping[str, Any] | None) -> None:
        self._cluster_config = _as_cluster_config(value)

    def settings(self) -> dict[str, Any]:
        """Every setting, validated again: the arguments of cstorch's CSX backend."""
        arguments = {
            "artifact_dir": self.artifact_dir,
            "compile_dir": self.compile_dir,
            "compile_only": self.compile_only,
            "validate_only": self.validate_only,
        }
        validated_arguments(CSXArgs, arguments, owner="CSX")
        self.cluster_config.validate()
        return {**arguments, "cluster_config": self.cluster_config.to_dict()}

    def check_runnable(self) -> None:
        """Check the settings, then hand off to cerebras.pytorch or say what is missing."""
        settings = self.settings()
        if not _importable(CEREBRAS_MODULE):
            message = (
                "The CSX backend needs the Cerebras software stack and a Cerebras cluster: the "
                f"{CEREBRAS_MODULE} package (Cerebras' cerebras_pytorch wheel, of the version "
                "matching the cluster) is not importable here, so nothing was run. This "
                "configuration is valid (see `plugtrain check`); to train on this machine, run "
                "the same command with --set trainer.init.backend=null --set "
                "trainer.init.device=CPU (or GPU)"
            )
            raise BackendError(message)
        self.cstorch_backend = build_cstorch_backend(settings)

    @property
    def device(self) -> Any:
        """The torch device of cstorch's backend (its lazy device)."""
        if self.cstorch_backend is None:
            self.check_runnable()
        return self.cstorch_backend.torch_device

    def configure_precision(self, settings: Any) -> None:
        """Hand ``fp16_type`` and ``precision_opt_level`` to cstorch, as Model Zoo does.

        That is ``cstorch.amp.set_half_dtype(fp16_type)`` and
        ``cstorch.backends.csx.precision.optimization_level = precision_opt_level`` (when
        set). As in Model Zoo, mixed precision is always on on CSX (``enabled: false`` is
        ignored with a warning) and cbfloat16 needs ``loss_scaling_factor: dynamic``.

        :param settings: a :class:`plugtrain.config.precision.PrecisionSettings`.
        :raises ConfigError: cbfloat16 without dynamic loss scaling.
        """
        if settings.fp16_type == "cbfloat16" and not settings.dynamic:
            message = (
                "cbfloat16 needs dynamic loss scaling on CSX (gradients could otherwise "
                "underflow or overflow): set loss_scaling_factor: dynamic"
            )
            raise ConfigError([ConfigIssue("precision.fp16_type", message)])
        if not settings.enabled:
            log.warning("precision: mixed precision is always on on CSX; enabled: false ignored")
        self.precision = settings
        if self.cstorch_backend is None:
            self.check_runnable()
        cstorch = importlib.import_module(CEREBRAS_MODULE)
        cstorch.amp.set_half_dtype(settings.fp16_type)
        if settings.precision_opt_level is not None:
            cstorch.backends.csx.precision.optimization_level = settings.precision_opt_level

    def apply_flags(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """Set ``csx.*`` flags (``None`` unsets one); returns their previous values.

        They are kept in :attr:`flags` and, when the Cerebras stack is importable, set on
        ``cerebras.pytorch.backends`` (``csx.performance.micro_batch_size`` is
        ``cstorch.backends.csx.performance.micro_batch_size``).
        """
        previous = {name: self.flags.get(name) for name in flags}
        for name, value in flags.items():
            if value is None:
                self.flags.pop(name, None)
            else:
                self.flags[name] = value
        if _importable(CEREBRAS_MODULE):
            backends = importlib.import_module(CEREBRAS_MODULE).backends
            for name, value in flags.items():
                *scopes, attribute = name.split(".")
                owner = backends
                for scope in scopes:
                    owner = getattr(owner, scope)
                setattr(owner, attribute, value)
        return previous

    def prepare_model(self, model: Any) -> Any:
        """The model compiled for the cluster through ``cerebras.pytorch.compile``."""
        if self.cstorch_backend is None:
            self.check_runnable()
        cstorch = importlib.import_module(CEREBRAS_MODULE)
        return cstorch.compile(model, self.cstorch_backend)


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _as_cluster_config(value: ClusterConfig | Mapping[str, Any] | None) -> ClusterConfig:
    if value is None:
        return ClusterConfig()
    if isinstance(value, ClusterConfig):
        return value
    if isinstance(value, Mapping):
        return ClusterConfig(**value)
    # Another ClusterConfig-like object (cstorch's own): take its fields by name.
    fields = getattr(value, "__dict__", None)
    if fields is None:
        message = f"must be a ClusterConfig or a mapping, got {type(value).__name__}"
        raise ConfigError([ConfigIssue("CSX.cluster_config", message)])
    return ClusterConfig(**{k: v for k, v in fields.items() if not k.startswith("_")})


def build_cstorch_backend(settings: Mapping[str, Any]) -> Any:
    """Build cstorch's own CSX backend from plugtrain's validated settings.

    That is ``cstorch.backend("CSX", ..., cluster_config=cstorch.distributed.ClusterConfig(...))``.

    :param settings: from :meth:`CSXBackend.settings`.
    """
    cstorch = importlib.import_module(CEREBRAS_MODULE)
    arguments = dict(settings)
    cluster = cstorch.distributed.ClusterConfig(**arguments.pop("cluster_config"))
    arguments = {k: v for k, v in arguments.items() if v is not None}
    return cstorch.backend("CSX", cluster_config=cluster, **arguments)
