"""Which param groups a scheduler targets, from its ``param_group_tags`` (no torch here).

The rules, shared by every scheduler, built-in or not (Model Zoo's ``param_group_tags``):

- ``param_group_tags`` absent or ``None``: every group; a string ``s``: the tag set ``{s}``; a
  list or set: that set (a tag listed twice is an error, and so is a tag that is neither a string
  nor ``None``);
- a group's own ``tags`` may be a string, a list or a set; a group without ``tags`` (or with
  ``tags: None``) carries the tag ``None``, so ``param_group_tags: [None]`` targets the untagged
  groups;
- a group is targeted when it carries at least one wanted tag; tags that select no group are an
  error listing the tags present. Untargeted groups are never touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["group_tags", "named_tags", "select_param_groups", "tag_problems", "wanted_tags"]

TagSet = frozenset[str | None]


def group_tags(tags: Any) -> TagSet:
    """A param group's ``tags`` value as a set; no tags means ``{None}``."""
    if tags is None:
        return frozenset({None})
    if isinstance(tags, str):
        return frozenset({tags})
    return frozenset(tags)


def tag_problems(param_group_tags: Any) -> Iterator[str]:
    """Why ``param_group_tags`` is malformed (nothing when it is fine)."""
    if param_group_tags is None or isinstance(param_group_tags, str):
        return
    tags = list(param_group_tags)
    for tag in tags:
        if tag is not None and not isinstance(tag, str):
            yield f"param_group_tags must hold strings or None, got {tag!r}"
            return
    duplicates = sorted({repr(t) for t in tags if tags.count(t) > 1})
    if duplicates:
        yield f"param_group_tags lists {', '.join(duplicates)} more than once"


def wanted_tags(param_group_tags: Any) -> TagSet | None:
    """The tag set a scheduler asks for; ``None`` means every group.

    :raises ValueError: for duplicates or values that are not strings or ``None``.
    """
    problems = list(tag_problems(param_group_tags))
    if problems:
        raise ValueError(problems[0])
    if param_group_tags is None:
        return None
    if isinstance(param_group_tags, str):
        return frozenset({param_group_tags})
    return frozenset(param_group_tags)


def named_tags(param_group_tags: Any) -> list[str]:
    """The string tags ``param_group_tags`` names, sorted (``None`` and anything else left out).

    Lenient where :func:`wanted_tags` is strict: for building param groups that carry the tags a
    scheduler asks for (the conformance checks' optimizers).
    """
    if isinstance(param_group_tags, str):
        return [param_group_tags]
    if isinstance(param_group_tags, list | tuple | set | frozenset):
        return sorted(t for t in param_group_tags if isinstance(t, str))
    return []


def select_param_groups(
    param_groups: Sequence[Mapping[str, Any]], param_group_tags: Any
) -> list[int]:
    """Indices of the groups that carry at least one of ``param_group_tags`` (all if ``None``).

    :raises ValueError: when the tags select no group; the message lists the tags present.
    """
    wanted = wanted_tags(param_group_tags)
    if wanted is None:
        return list(range(len(param_groups)))
    chosen = [i for i, g in enumerate(param_groups) if group_tags(g.get("tags")) & wanted]
    if not chosen:
        present = sorted({repr(t) for g in param_groups for t in group_tags(g.get("tags"))})
        asked = ", ".join(sorted(repr(t) for t in wanted))
        message = (
            f"param_group_tags {asked} select no param group of the optimizer; "
            f"tags present: {', '.join(present)} (None: groups without tags)"
        )
        raise ValueError(message)
    return chosen
