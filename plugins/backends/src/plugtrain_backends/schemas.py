"""Argument schemas of the backends (torch-free)."""

from __future__ import annotations

import attrs

from plugtrain.schema import arg


@attrs.frozen
class CPUArgs:
    """Run on the host CPU (one process; data parallel over gloo under torchrun)."""

    artifact_dir: str | None = arg(None, help="where the backend writes its artifacts")
