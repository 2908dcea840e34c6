"""The ``dpo`` checkpoint converter: the policy decoder's family converter, under its section.

Import reads a Hugging Face folder of any decoder family that has a converter into both the
policy and the reference; export writes the policy as its family's Hugging Face folder.
Torch-free (listing converters imports it).
"""

from __future__ import annotations

from plugtrain.conversion.declaration import CheckpointConverter, Wrapping

__all__ = ["DPO"]

DPO = CheckpointConverter(
    model="dpo",
    hf_model_types=(),
    hf_architecture="the policy family's",
    hf_prefix="",
    config=(),
    weights=(),
    detected=False,
    wraps=Wrapping("policy_model", copies=("ref_model",), fixed={"dpo": {}}),
    note=(
        "policy_model's family converter (config.json's model_type in, policy_model.name out); "
        "import fills policy and reference, export writes the policy."
    ),
)
"""Model Zoo's ``dpo`` converter."""
