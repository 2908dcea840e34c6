"""The vocabulary of preprocessed GPT HDF5 data, as its ``data_params.json`` records it.

``plugtrain preprocess`` (and Model Zoo's preprocessing) writes the tokenizer's ``vocab_size``
next to the files. The two data processors' schemas answer ``data_vocabulary`` from it, so
that ``plugtrain check`` refuses a model whose ``vocab_size`` is smaller (torch- and h5py-free).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["data_vocabulary"]


def _recorded(folder: str) -> int | None:
    path = os.path.join(folder, "data_params.json")
    try:
        with open(path, encoding="utf-8") as handle:
            params = json.load(handle)
    except (OSError, ValueError):
        return None  # no record (or an unreadable one): the vocabulary is not known here
    size = params.get("vocab_size") if isinstance(params, Mapping) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def data_vocabulary(arguments: Mapping[str, Any]) -> tuple[int, str] | None:
    """The largest ``vocab_size`` the ``data_dir`` folders record, and the file saying so.

    :returns: ``None`` when no folder has a ``data_params.json`` with a ``vocab_size``.
    """
    folders = arguments.get("data_dir")
    if folders is None:
        return None
    found: tuple[int, str] | None = None
    for folder in [folders] if isinstance(folders, str) else list(folders):
        size = _recorded(str(folder))
        if size is not None and (found is None or size > found[0]):
            found = (size, os.path.join(str(folder), "data_params.json"))
    return found
