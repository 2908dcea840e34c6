"""``plugtrain preprocess`` ``mode: dpo``: prompt/chosen/rejected records to DPO HDF5 samples.

Each record's semantic data array (``dpo_read_hook``: turns ``prompt``, ``chosen``,
``rejected``) becomes one sample ``[6, S]``: ``chosen_input_ids``, ``chosen_attention_mask``,
``chosen_labels``, then the same three rows for ``rejected`` (Model Zoo's DPO layout).

- Chat-templated (``dpo_read_hook``, Model Zoo's path): the prompt is a ``user`` turn and each
  response an ``assistant`` turn starting with ``response_delimiter``; the tokenizer's chat
  template renders both conversations; the prompt is the text before the delimiter, the
  response the text after it (the template's end-of-turn text included), tokenized with
  ``add_special_tokens=False``. A prompt whose last token merges with the response's first
  gives that token to the response (Model Zoo's ``build_tokenized_answer``).
- Plain (``dpo_text_read_hook``): prompt ids with the tokenizer's special tokens (its BOS),
  each response's ids without them, then EOS.

A sequence is prompt + response, at most ``max_seq_length + 1`` tokens: longer, the prompt keeps
its last ``max_prompt_length`` tokens, then the response is cut (Model Zoo's ``keep_end``).
``input_ids = seq[:-1]``, ``labels = seq[1:]``, and the mask is 1 exactly where the label is a
response token (Model Zoo also marks the last input, whose label is padding); ids and labels
are padded with ``pad_id``, the mask with 0. A record with an empty chosen or rejected text, or
no response token left, is discarded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["PLAIN_PROMPT", "DpoEncoder", "dpo_rows"]

PLAIN_PROMPT = "text_prompt"
"""The prompt turn's type of the plain path (``dpo_text_read_hook``)."""
SIDES = ("chosen", "rejected")


def _texts(semantic: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for turn in semantic:
        parts = [str(p.get("text") or "") for p in turn.get("content") or [] if "text" in p]
        texts[str(turn.get("type"))] = "".join(parts).strip()
    return texts


def dpo_rows(
    prompt: Sequence[int],
    responses: Sequence[Sequence[int]],
    *,
    max_seq_length: int,
    max_prompt_length: int,
    pad_id: int,
) -> np.ndarray | None:
    """The ``[6, S]`` sample of a prompt and its two responses (ids); ``None``: nothing to score.

    See the module for the truncation and the rows.
    """
    budget = max_seq_length + 1
    longer = max(len(r) for r in responses)
    if len(prompt) + longer > budget:
        prompt = prompt[-max_prompt_length:] if max_prompt_length > 0 else []
    rows = np.zeros((6, max_seq_length), dtype=np.int32)
    for index, whole in enumerate(responses):
        response = whole[: max(budget - len(prompt), 0)]
        if not response or not prompt:
            return None
        seq = [*prompt, *response]
        length = len(seq) - 1
        ids, mask, labels = rows[3 * index : 3 * index + 3]
        ids[:] = labels[:] = pad_id
        ids[:length] = seq[:-1]
        labels[:length] = seq[1:]
        mask[len(prompt) - 1 : length] = 1
    return rows


class DpoEncoder:
    """Encodes DPO semantic data arrays (see the module).

    :param tokenizer: a :class:`~plugtrain_models.data.tokenizer_folder.TokenizerFolder`.
    :param clean: the text cleaning of the run (ftfy, wikitext detokenizing).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        eos_id: int,
        pad_id: int,
        max_seq_length: int,
        max_prompt_length: int = 512,
        response_delimiter: str = "<response>",
        clean: Callable[[str], str] = str,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_id, self.pad_id = eos_id, pad_id
        self.max_seq_length, self.max_prompt_length = max_seq_length, max_prompt_length
        self.delimiter = response_delimiter
        self.clean = clean
        self.stats: Counter[str] = Counter()

    def encode(self, semantic: Sequence[Mapping[str, Any]]) -> np.ndarray | None:
        """The sample of one record, ``None`` when it is discarded (counted in :attr:`stats`).

        :raises ValueError: the array has no ``prompt`` (or ``text_prompt``) turn.
        """
        texts = _texts(semantic)
        plain = PLAIN_PROMPT in texts
        if not plain and "prompt" not in texts:
            types = ", ".join(texts) or "none"
            raise ValueError(f"mode dpo needs prompt, chosen and rejected turns, got {types}")
        if not texts.get("chosen") or not texts.get("rejected"):
            self.stats["discarded_files"] += 1
            return None
        if plain:
            prompt, responses = self._plain(texts)
        else:
            found = self._chat(texts)
            if found is None:
                self.stats["discarded_files"] += 1
                return None
            prompt, responses = found
        rows = dpo_rows(
            prompt, responses, max_seq_length=self.max_seq_length,
            max_prompt_length=self.max_prompt_length, pad_id=self.pad_id,
        )  # fmt: skip
        if rows is None:
            self.stats["discarded_files"] += 1
        return rows

    def _count(self, text: str) -> str:
        self.stats["raw_chars_count"] += len(text)
        self.stats["raw_bytes_count"] += len(text.encode("utf-8"))
        return text

    def _plain(self, texts: Mapping[str, str]) -> tuple[list[int], list[list[int]]]:
        encode = self.tokenizer.encode
        prompt = encode(self.clean(self._count(texts[PLAIN_PROMPT])))[0]
        responses = [
            [*encode(self.clean(self._count(texts[s])), add_special_tokens=False)[0], self.eos_id]
            for s in SIDES
        ]
        return list(prompt), responses

    def _chat(self, texts: Mapping[str, str]) -> tuple[list[int], list[list[int]]] | None:
        rendered = []
        for side in SIDES:
            messages = [
                {"role": "user", "content": texts["prompt"]},
                {"role": "assistant", "content": self.delimiter + texts[side]},
            ]
            rendered.append(self.clean(self._count(self.tokenizer.apply_chat_template(messages))))
        cut = rendered[0].rfind(self.delimiter)
        if cut == -1:  # the template dropped the delimiter: the prompt cannot be found
            return None
        prompt_text = rendered[0][:cut]
        encode = self.tokenizer.encode
        prompt = list(encode(prompt_text, add_special_tokens=False)[0])
        wholes = [
            list(encode(t[:cut] + t[cut + len(self.delimiter) :], add_special_tokens=False)[0])
            for t in rendered
        ]
        start = min(
            len(prompt) if ids[: len(prompt)] == prompt else len(prompt) - 1 for ids in wholes
        )
        return wholes[0][:start], [ids[start:] for ids in wholes]
