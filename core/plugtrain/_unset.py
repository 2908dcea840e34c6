"""The marker of an argument left unset, told apart from ``None`` (torch-free)."""

from __future__ import annotations

from typing import Any

__all__ = ["UNSET"]

UNSET: Any = object()
"""An argument left unset: ``ckpt_path`` of ``fit`` and ``validate`` resumes from the newest
sound checkpoint (when autoloading is on), where ``None`` says "no checkpoint"."""
