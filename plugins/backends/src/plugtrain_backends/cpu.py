"""The CPU backend."""

from __future__ import annotations

from typing import Any

import attrs

from plugtrain.backends import claim_backend_type
from plugtrain.schema import validated_arguments
from plugtrain_backends.schemas import CPUArgs

__all__ = ["CPUBackend"]


@attrs.define(init=False)
class CPUBackend:
    """Runs on the host CPU. Creating it claims the process's single backend type, ``CPU``."""

    backend_type = "CPU"
    artifact_dir: str | None

    def __init__(self, artifact_dir: str | None = None) -> None:
        args = validated_arguments(CPUArgs, {"artifact_dir": artifact_dir}, owner="CPU")
        claim_backend_type(self.backend_type)
        self.artifact_dir = args["artifact_dir"]

    @property
    def device(self) -> Any:
        """The torch device models and batches are moved to."""
        import torch

        return torch.device("cpu")
