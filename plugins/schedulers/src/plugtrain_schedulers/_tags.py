"""Moved to the core: :mod:`plugtrain.tags` (kept importable here)."""

from __future__ import annotations

from plugtrain.tags import group_tags, select_param_groups, tag_problems, wanted_tags

__all__ = ["group_tags", "select_param_groups", "tag_problems", "wanted_tags"]
