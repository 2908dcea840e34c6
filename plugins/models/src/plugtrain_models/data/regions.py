"""Character regions of a fine-tuning sample and their token ranges (Model Zoo's rules).

A region is a span of the formatted text (a prompt, a completion, a chat turn's content) with a
loss weight. These functions port Model Zoo 2.10's ``append_eos_to_multiple_semantic_regions``,
``find_region_in_formatted_string`` and ``find_token_range`` (text regions only), so that the
masks written are Model Zoo's to the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "OffsetArrays",
    "find_token_range",
    "find_token_range_arrays",
    "fold_end_tokens",
    "locate_markers",
]

Region = dict[str, Any]
"""``{role, indices: (start, end), loss_weight, ...}``: character indices until tokenized."""


def fold_end_tokens(text: str, regions: list[Region], end_token: str, is_chat: bool) -> None:
    """Extend each region over the end token (EOS or end of turn) that follows it, in place.

    An end token inside a region stays there; one between a region and the next, or after the
    last region, joins that region (so the model learns to emit it). In a chat with at most
    one end token, each region followed by a gap (the template's end-of-turn text) is marked
    ``handle_turn_token``: its token range takes one more token.
    """
    if not regions or not end_token:
        return
    ends: list[tuple[int, int]] = []
    search = regions[0]["indices"][0]
    while search < len(text):
        found = text.find(end_token, search)
        if found == -1:
            break
        search = found + len(end_token)
        ends.append((found, search))
    end_pos = region_pos = 0
    while end_pos < len(ends) and region_pos < len(regions):
        end_start, end_stop = ends[end_pos]
        start, stop = regions[region_pos]["indices"]
        if start <= end_start < stop:
            end_pos += 1
            continue
        if region_pos + 1 < len(regions):
            if stop <= end_start < regions[region_pos + 1]["indices"][0]:
                regions[region_pos]["indices"] = (start, end_stop)
                end_pos += 1
        else:
            regions[region_pos]["indices"] = (start, end_stop)
            end_pos += 1
        region_pos += 1
    if not is_chat or len(ends) > 1:  # one: the last end of turn may be the EOS itself
        return
    for i in range(1, len(regions)):
        start, stop = regions[i]["indices"]
        if regions[i - 1]["indices"][1] != start:
            regions[i - 1]["handle_turn_token"] = True
        if i == len(regions) - 1 and stop < len(text):
            regions[i]["handle_turn_token"] = True


def locate_markers(text: str, regions: list[Region]) -> str:
    """Remove each region's ``marker`` from the rendered chat; set its character ``indices``.

    :raises ValueError: a marker is missing (the chat template dropped or changed a message).
    """
    search = 0
    for region in regions:
        marker = region.pop("marker")
        found = text.find(marker, search)
        if found == -1:
            message = (
                f"the chat template does not show the content of a {region['role']} turn as "
                "it is (it must write message['content'] unchanged)"
            )
            raise ValueError(message)
        text = text.replace(marker, "")
        region["indices"] = (found, found + region["length"])
        search = found + region["length"]
    return text


def find_token_range(
    region: Region, offsets: Sequence[tuple[int, int]], first: int
) -> tuple[int, int]:
    """The ``[start, end)`` tokens covering ``region``'s characters, searching from token ``first``.

    The first token that contains or follows the region's first character, to the last token
    that reaches its end (or ends just before the next token starts beyond it).

    :raises ValueError: the offsets do not cover the region.
    """
    string_start, string_end = region["indices"]
    start = next(
        (
            i
            for i in range(first, len(offsets))
            if (offsets[i][0] <= string_start < offsets[i][1]) or offsets[i][0] > string_start
        ),
        None,
    )
    if start is None:
        raise ValueError("the tokenizer's offsets do not cover a region of the text")
    end = next(
        (
            i
            for i in range(start, len(offsets))
            if (offsets[i][1] >= string_end and offsets[i][0] < string_end)
            or (
                offsets[i][1] < string_end
                and (i + 1 >= len(offsets) or offsets[i + 1][0] >= string_end)
            )
        ),
        None,
    )
    if end is None:
        raise ValueError("the tokenizer's offsets do not cover the end of a region of the text")
    return start, end + 1


class OffsetArrays:
    """Token offsets as arrays, with what :func:`find_token_range_arrays` asks of them.

    :param starts: each token's first character.
    :param ends: each token's end (one past its last character).
    :param bounds: where the arrays hold several texts' tokens laid end to end: text ``k``'s
        tokens are ``bounds[k]:bounds[k + 1]`` (:meth:`part` gives one text's offsets).
    """

    def __init__(
        self, starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray | None = None
    ) -> None:
        self.starts, self.ends = starts, ends
        # a token is at or past a character c where (start <= c < end) or start > c, i.e.
        # where max(start, end) > c
        self.reach = np.maximum(starts, ends)
        # the next token's start; past a text's last token: beyond every character
        self.following = np.empty_like(starts)
        self.following[:-1] = starts[1:]
        self.following[-1:] = np.iinfo(starts.dtype).max
        if bounds is not None:
            lasts = np.asarray(bounds[1:], dtype=np.int64) - 1
            self.following[lasts[lasts >= 0]] = np.iinfo(starts.dtype).max
        # no token before the first where max(end, following) reaches c can end a region at c
        self.closing = np.maximum(ends, self.following)

    def part(self, low: int, high: int) -> OffsetArrays:
        """The offsets of tokens ``low:high`` (one text's, where ``bounds`` were given)."""
        part = object.__new__(OffsetArrays)
        part.starts, part.ends = self.starts[low:high], self.ends[low:high]
        part.reach, part.following = self.reach[low:high], self.following[low:high]
        part.closing = self.closing[low:high]
        return part

    def __len__(self) -> int:
        return len(self.starts)


def find_token_range_arrays(region: Region, offsets: OffsetArrays, first: int) -> tuple[int, int]:
    """:func:`find_token_range` over :class:`OffsetArrays`: the same rule, with numpy.

    :raises ValueError: the offsets do not cover the region.
    """
    string_start, string_end = region["indices"]
    if first < len(offsets) and offsets.reach[first] > string_start:
        start = first  # most regions start at the first token searched
    else:
        hits = offsets.reach[first:] > string_start
        found = int(hits.argmax()) if len(hits) else 0
        if not len(hits) or not hits[found]:
            raise ValueError("the tokenizer's offsets do not cover a region of the text")
        start = first + found
    # the first token that may end the region, then the full rule from there
    reaching = offsets.closing[start:] >= string_end
    candidate = start + int(reaching.argmax())
    if reaching[candidate - start]:  # start < len(offsets): never empty
        if offsets.ends[candidate] < string_end or offsets.starts[candidate] < string_end:
            return start, candidate + 1
    else:
        candidate = len(offsets)
    hits = np.where(
        offsets.ends[candidate:] >= string_end,
        offsets.starts[candidate:] < string_end,
        offsets.following[candidate:] >= string_end,
    )
    found = int(hits.argmax()) if len(hits) else 0
    if not len(hits) or not hits[found]:
        raise ValueError("the tokenizer's offsets do not cover the end of a region of the text")
    return start, candidate + found + 1
