"""Fine-tuning samples: a read hook's semantic data array to token ids and a loss mask.

Model Zoo 2.10's ``FinetuningTokenGenerator`` for text: prompt/completion records become
``prompt + sep_token + completion + eos_token`` tokenized with the tokenizer's special tokens;
chats are rendered with the chat template and tokenized without them. The loss weight is 1 on
completion and assistant tokens and on the EOS or end-of-turn token that closes them, 0
elsewhere; ``semantic_loss_weight`` and ``semantic_drop_mask`` override it per region.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from plugtrain_models.data.regions import (
    OffsetArrays,
    Region,
    find_token_range_arrays,
    fold_end_tokens,
    locate_markers,
)
from plugtrain_models.data.tokenizer_folder import TokenizerFolder
from plugtrain_models.data.truncation import truncate

__all__ = ["Encoded", "FinetuningEncoder", "Skipped", "Truncation", "vsl_rows"]

SCORED_ROLES = ("assistant", "completion")
"""Roles whose text carries loss weight 1 by default."""


@attrs.frozen
class Encoded:
    """One sample before the shift: all its tokens and each token's loss weight.

    Lists, or int32 arrays (what :class:`FinetuningEncoder` makes).
    """

    token_ids: Sequence[int] | np.ndarray
    loss_mask: Sequence[int] | np.ndarray


@attrs.frozen
class Truncation:
    """``dataset.truncate_to_msl``: how long samples are cut to ``max_seq_length``."""

    mode: str = "keep_end"
    max_turn_length: int | None = None


class Skipped(Exception):
    """A record that makes no sample; ``reason`` names the statistic it counts in."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FinetuningEncoder:
    """Encodes semantic data arrays as Model Zoo's fine-tuning token generator does.

    :param clean: applied to each region's text (ftfy when ``use_ftfy``).
    :param end_of_turn_token: the text folded into a scored region after it (default: EOS).
    """

    def __init__(
        self,
        tokenizer: TokenizerFolder,
        *,
        eos_id: int,
        max_seq_length: int,
        min_sequence_len: int = 10,
        sep_token: str | None = "<|sep|>",
        end_of_turn_token: str | None = None,
        truncation: Truncation | None = None,
        clean: Callable[[str], str] = str,
        semantic_loss_weight: Mapping[str, float] | None = None,
        semantic_drop_mask: Mapping[str, bool] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_token = tokenizer.id_to_token(eos_id) or ""
        self.max_seq_length = max_seq_length
        self.min_sequence_len = min_sequence_len
        self.sep_token = sep_token
        self.end_token = end_of_turn_token or self.eos_token
        self.truncation = truncation
        self.clean = clean
        self.loss_weights = dict(semantic_loss_weight or {})
        self.drop = dict(semantic_drop_mask or {})
        self.stats = {"raw_chars_count": 0, "raw_bytes_count": 0}
        self.stats.update(normalized_chars_count=0, normalized_bytes_count=0)

    def _parts(self, turn: Mapping[str, Any]) -> list[tuple[str, float, bool]]:
        """``(text, loss weight, dropped)`` of each part of a turn's content."""
        role, content = turn.get("type"), turn.get("content") or []
        weights, drops = turn.get("semantic_loss_weight"), turn.get("semantic_drop_mask")
        parts = []
        for i, part in enumerate(content):
            key, value = next(iter(part.items()))
            if key != "text":
                raise ValueError(f"a {key!r} region: only text is supported")
            if not value:
                raise Skipped("raw_docs_skipped")
            cleaned = self.clean(value)
            self.stats["raw_chars_count"] += len(value)
            self.stats["raw_bytes_count"] += len(value.encode("utf-8"))
            self.stats["normalized_chars_count"] += len(cleaned)
            self.stats["normalized_bytes_count"] += len(cleaned.encode("utf-8"))
            default = 1 if role in SCORED_ROLES else 0
            weight = weights[i] if weights else (self.loss_weights.get(key) or default)
            dropped = drops[i] if drops else self.drop.get(key, False)
            parts.append((cleaned, weight, bool(dropped)))
        return parts

    def _plain(self, semantic: Sequence[Mapping[str, Any]]) -> tuple[str, list[Region]]:
        text, regions = "", []
        for turn in semantic:
            role = turn["type"]
            content = ""
            for part, weight, dropped in self._parts(turn):
                if dropped or not part:
                    continue
                start = len(text) + len(content)
                regions.append({"role": role, "indices": (start, start + len(part))})
                regions[-1]["loss_weight"] = weight
                content += part
            if role == "prompt":
                text = content + (self.sep_token or "")  # Model Zoo: a prompt starts anew
            elif role == "completion":
                text += content + self.eos_token
        return text, regions

    def _chat(self, semantic: Sequence[Mapping[str, Any]]) -> tuple[str, list[Region]]:
        messages, regions, number = [], [], 0
        for turn in semantic:
            role, content = turn["type"], ""
            for part, weight, dropped in self._parts(turn):
                if not dropped and part:
                    marker = f"<{number}_text>"
                    regions.append({"role": role, "marker": marker, "length": len(part)})
                    regions[-1]["loss_weight"] = weight
                    content += marker + part
                number += 1
            messages.append({"role": role, "content": content})
        rendered = self.tokenizer.apply_chat_template(messages)
        return locate_markers(rendered, regions), regions

    def _format(self, semantic: Sequence[Mapping[str, Any]]) -> tuple[str, list[Region], bool]:
        """The text to tokenize, its regions, and whether it is a chat."""
        if not semantic:
            raise Skipped("raw_docs_skipped")
        is_chat = semantic[0].get("type") not in ("prompt", "completion")
        text, regions = self._chat(semantic) if is_chat else self._plain(semantic)
        if not text:
            raise Skipped("raw_docs_skipped")
        return text, regions, is_chat

    def encode(self, semantic: Sequence[Mapping[str, Any]]) -> Encoded:
        """The sample of one record (int32 arrays).

        :raises Skipped: the record makes no sample (``raw_docs_skipped``: empty or missing
            text; ``discarded_files``: too long without truncation, or too short).
        :raises ValueError: the chat template or the tokenizer's offsets lose a region.
        """
        text, regions, is_chat = self._format(semantic)
        token_ids, offsets = self.tokenizer.encode(text, add_special_tokens=not is_chat)
        flat = np.array(offsets, dtype=np.int64).reshape(-1, 2)
        arrays = OffsetArrays(flat[:, 0], flat[:, 1])
        return self._sample(text, regions, is_chat, np.array(token_ids, dtype=np.int32), arrays)

    def encode_many(
        self, semantics: Sequence[Sequence[Mapping[str, Any]]]
    ) -> list[Encoded | Skipped]:
        """:meth:`encode` of each record, tokenized in one batch.

        A record that makes no sample gives its :class:`Skipped` in its place.
        """
        formatted: list[tuple[str, list[Region], bool] | Skipped] = []
        for semantic in semantics:
            try:
                formatted.append(self._format(semantic))
            except Skipped as skipped:
                formatted.append(skipped)
        results: list[Encoded | Skipped] = list(formatted)  # type: ignore[arg-type]
        for is_chat in (False, True):
            todo = [i for i, f in enumerate(formatted) if isinstance(f, tuple) and f[2] == is_chat]
            if not todo:
                continue
            texts = [formatted[i][0] for i in todo]  # type: ignore[index]
            ids, starts, ends, bounds = self.tokenizer.encode_batch_flat(texts, not is_chat)
            offsets = OffsetArrays(starts, ends, bounds)
            for number, i in enumerate(todo):
                text, regions, _ = formatted[i]  # type: ignore[misc]
                low, high = int(bounds[number]), int(bounds[number + 1])
                try:
                    results[i] = self._sample(
                        text, regions, is_chat, ids[low:high], offsets.part(low, high)
                    )
                except Skipped as skipped:
                    results[i] = skipped
        return results

    def _sample(
        self,
        text: str,
        regions: list[Region],
        is_chat: bool,
        token_ids: np.ndarray,
        offsets: OffsetArrays,
    ) -> Encoded:
        """The sample of a formatted text from its ids and offsets: truncated, with its mask."""
        fold_end_tokens(text, regions, self.end_token, is_chat)
        tokens: list[tuple[str, int, int, float]] = []
        first = 0
        for region in regions:
            start, end = find_token_range_arrays(region, offsets, first)
            if region.get("handle_turn_token"):
                end += 1
            tokens.append((region["role"], start, end, region["loss_weight"]))
            first = end
        total = len(token_ids)
        if total > self.max_seq_length:
            truncated = self._truncate(token_ids.tolist(), tokens)
            token_ids = np.asarray(truncated[0], dtype=np.int32)
            tokens = truncated[1]
        if total < self.min_sequence_len:  # Model Zoo compares the length before truncation
            raise Skipped("discarded_files")
        mask = np.zeros(len(token_ids), dtype=np.int32)  # int32, as Model Zoo writes
        for _role, start, end, weight in tokens:
            stop = min(end, len(token_ids))
            if stop > start:
                mask[start:stop] = int(weight)
        return Encoded(token_ids, mask)

    def _truncate(
        self, token_ids: list[int], tokens: list[tuple[str, int, int, float]]
    ) -> tuple[list[int], list[tuple[str, int, int, float]]]:
        """The sample cut to ``max_seq_length`` as ``dataset.truncate_to_msl`` says.

        :raises Skipped: no truncation asked for, or it cannot cut enough.
        """
        if self.truncation is None:
            raise Skipped("discarded_files")
        t = self.truncation
        turn = t.max_turn_length if t.max_turn_length is not None else self.max_seq_length
        result = truncate(token_ids, tokens, self.max_seq_length, turn, t.mode)
        if result is None:
            raise Skipped("discarded_files")
        return result


def vsl_rows(samples: Sequence[Encoded], msl: int, pad_id: int) -> np.ndarray:
    """``[5, msl]``: samples packed end to end, shifted once, with spans and positions.

    Each sample (the last one less its final token, which only serves as a label) gets
    ``attention_span`` ``n-1, ..., 0`` and ``position_ids`` ``0, ..., n-1``; padding gets 0.
    """
    tokens = np.concatenate([np.asarray(s.token_ids, dtype=np.int32) for s in samples])
    mask = np.concatenate([np.asarray(s.loss_mask, dtype=np.int32) for s in samples])
    lengths = [len(s.token_ids) for s in samples]
    lengths[-1] -= 1
    spans = np.concatenate([np.arange(n - 1, -1, -1, dtype=np.int32) for n in lengths])
    positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
    rows = np.zeros((5, msl), dtype=np.int32)
    length = len(tokens) - 1
    rows[0, :] = rows[2, :] = pad_id
    rows[0, :length] = tokens[:-1]
    rows[1, :length] = mask[1:]
    rows[2, :length] = tokens[1:]
    rows[3, :length] = spans
    rows[4, :length] = positions
    return rows
