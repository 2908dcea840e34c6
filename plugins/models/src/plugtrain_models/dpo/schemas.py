"""Argument schemas of ``dpo`` and ``DpoHDF5DataProcessor`` (torch-free: ``check`` reads them).

Model Zoo 2.10's ``DPOModelConfig``: a ``policy_model`` section holding any decoder family's
keys (``name`` picks the family), the ``dpo`` parameters of the loss, and
``compute_eval_metrics``. The policy's keys are checked against its family's schema, as a
decoder's own ``model:`` section is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from plugtrain.schema import Problem, about, arg, argument_problems
from plugtrain_models.data.schemas import IterableProcessorArgs
from plugtrain_models.schemas import GPT2_FAMILIES, GPTJ_FAMILIES, schema_for

__all__ = ["DPO_FEATURES", "LOSS_TYPES", "DpoArgs", "DpoParameters", "DpoProcessorArgs"]

LOSS_TYPES = ("sigmoid", "hinge", "ipo", "dpop")
"""Model Zoo's ``DPOLossType`` values."""
DPO_FEATURES = (
    "chosen_input_ids",
    "chosen_attention_mask",
    "chosen_labels",
    "rejected_input_ids",
    "rejected_attention_mask",
    "rejected_labels",
)
"""The six rows of a DPO sample, in the order the preprocessor writes them."""


@attrs.frozen
class DpoParameters:
    """Model Zoo's ``DPOParameters``: the loss and its reference."""

    beta: float | str = arg(0.1, help="temperature of the implicit reward beta*(log pi - log ref)")
    reference_free: bool = arg(
        False, help="no reference model: its log-probabilities count as 0 (no rewards logged)"
    )
    loss_type: Literal["sigmoid", "hinge", "ipo", "dpop"] = arg(
        "sigmoid", help="sigmoid (DPO), hinge (SLiC), ipo (per-token means), dpop (DPO-Positive)"
    )
    disable_dropout: bool = arg(True, help="set every dropout of policy and reference to 0")
    dpop_penalty_weight: float | str = arg(
        5.0, help="DPOP's lambda: weight of max(0, ref - policy) on the chosen log-prob"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """``beta`` is a positive number; ``dpop_penalty_weight`` a number."""
        for key in ("beta", "dpop_penalty_weight"):
            try:
                value = float(arguments[key])
            except (TypeError, ValueError):
                yield about(key, f"must be a number, got {arguments[key]!r}")
                continue
            if key == "beta" and not value > 0:
                yield about(key, f"must be > 0, got {arguments[key]!r}")
        if arguments["loss_type"] == "dpop" and arguments["reference_free"]:
            yield about(("loss_type", "reference_free"), "dpop needs the reference model")


@attrs.frozen
class DpoArgs:
    """``dpo``: Model Zoo's direct preference optimisation of a decoder against a frozen copy.

    Batches hold ``chosen_{input_ids,attention_mask,labels}`` and ``rejected_...`` (the
    attention masks are loss masks over the responses); the loss compares the policy's summed
    response log-probabilities with the reference's (``dpo.loss_type``).
    """

    policy_model: dict[str, Any] = arg(help="the decoder trained: a family's keys with its name")
    dpo: dict[str, Any] = arg(section=DpoParameters, help="the loss and its reference")
    compute_eval_metrics: bool = arg(True, help="rewards and log-probs in evaluation")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """``policy_model`` names a decoder family and its keys check against that family's."""
        yield from policy_problems(arguments["policy_model"])


POLICY_FAMILIES = (*GPT2_FAMILIES, *GPTJ_FAMILIES)
"""The families a policy may be (every decoder plugtrain has)."""


def policy_keys(section: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(family, keys without the name)`` of a ``policy_model`` section (``model_name`` too)."""
    keys = dict(section)
    name = keys.pop("name", None)
    if name is None:
        name = keys.pop("model_name", None)
    return str(name), keys


def policy_problems(section: Any) -> Iterator[Problem]:
    """Problems of a ``policy_model`` section, each named ``policy_model.<key>``."""
    if not isinstance(section, Mapping):
        yield about("policy_model", f"must be a mapping, got {type(section).__name__}")
        return
    family, keys = policy_keys(section)
    if family not in POLICY_FAMILIES:
        families = ", ".join(POLICY_FAMILIES)
        yield about("policy_model", f"name must be a decoder family ({families}), got {family!r}")
        return
    schema = schema_for(family)
    ignored = getattr(schema, "ignored_arguments", {})
    keys = {k: v for k, v in keys.items() if k not in ignored}
    for problem in argument_problems(schema, keys):
        where = f"policy_model.{problem.key}" if problem.key else "policy_model"
        yield about("policy_model", f"{where}: {problem.message}")


@attrs.frozen
class DpoProcessorArgs(IterableProcessorArgs):
    """Model Zoo's DpoHDF5DataProcessor: GptHDF5DataProcessor over the six DPO rows."""

    features_list: list[str] = arg(
        list(DPO_FEATURES),
        help="names of the rows of each sample (data_params.json's features replace them when "
        "data_dir is one folder)",
    )
