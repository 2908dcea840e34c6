"""A small preference data set in Model Zoo's DPO HDF5 format, for trying ``dpo`` on a laptop.

``python -m plugtrain_models.dpo.samples [FOLDER]`` writes the data of
``examples/modelzoo_dpo.yaml`` (default ``runs/data/dpo``): made-up questions, each with a
chosen answer that repeats the question's subject and a rejected one that does not, as bytes
(ids 0-255, EOS 256), laid out by the rules of ``mode: dpo`` (:func:`.encoding.dpo_rows`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import h5py
import numpy as np

from plugtrain_models.dpo.encoding import dpo_rows
from plugtrain_models.dpo.schemas import DPO_FEATURES

__all__ = ["EOS", "write_dpo_samples"]

EOS = 256
"""The end-of-text id after the 256 byte values (the vocabulary has 257 ids)."""
SUBJECTS = ["cat", "river", "stone", "lamp", "tree", "boat", "bread", "clock"]
OTHERS = ["no idea.", "ask later.", "maybe.", "who knows?"]


def write_dpo_samples(
    folder: str | Path, count: int = 256, max_seq_length: int = 48, seed: int = 0
) -> Path:
    """Write ``count`` DPO samples ``[6, max_seq_length]`` to ``folder`` (two files)."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        subject = rng.choice(SUBJECTS)
        prompt = list(f"Q: what is the {subject}? A: ".encode())
        chosen = [*f"the {subject} is a {subject}.".encode(), EOS]
        rejected = [*rng.choice(OTHERS).encode(), EOS]
        rows = dpo_rows(
            prompt, [chosen, rejected], max_seq_length=max_seq_length, max_prompt_length=32,
            pad_id=EOS,
        )  # fmt: skip
        if rows is not None:
            samples.append(rows)
    data = np.stack(samples)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    half = len(data) // 2
    for index, part in enumerate((data[:half], data[half:])):
        with h5py.File(out / f"output_chunk_0_{index}.h5", "w") as file:
            file.create_dataset(
                "data", data=part, compression="gzip", chunks=(1, 6, max_seq_length)
            )
            file.attrs["n_examples"] = part.shape[0]
    params = {
        "features": list(DPO_FEATURES), "vocab_size": EOS + 1, "eos_id": EOS, "pad_id": EOS,
        "max_seq_length": max_seq_length,
        "processing": {"vocab_size": EOS + 1, "eos_id": EOS, "pad_id": EOS},
    }  # fmt: skip
    (out / "data_params.json").write_text(json.dumps(params, indent=4) + "\n", "utf-8")
    return out


if __name__ == "__main__":
    written = write_dpo_samples(sys.argv[1] if len(sys.argv) > 1 else "runs/data/dpo")
    print(f"{written}: DPO samples written")
