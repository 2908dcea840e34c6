"""The registered constructors of the BERT family and ESM-2, one per Model Zoo name.

Each takes exactly its schema's keys (checked as a run file checks them): ``bert``, ``esm2``,
``bert/classifier``, ``bert/token_classifier`` and ``bert/extractive_summarization``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.encoders.bert import (
    BertClassifierModel,
    BertPretrainingModel,
    BertSummarizationModel,
    BertTokenClassifierModel,
)
from plugtrain_models.encoders.schemas_bert import (
    BertArgs,
    BertClassifierArgs,
    BertSummarizationArgs,
    BertTokenClassifierArgs,
    Esm2Args,
)
from plugtrain_models.encoders.settings_bert import resolve_bert
from plugtrain_models.rules import number

__all__ = [
    "BERT_SCHEMAS",
    "bert",
    "bert_classifier",
    "bert_summarization",
    "bert_token_classifier",
    "build_bert",
    "esm2",
]

BERT_SCHEMAS: dict[str, type] = {
    "bert": BertArgs,
    "bert/classifier": BertClassifierArgs,
    "bert/token_classifier": BertTokenClassifierArgs,
    "bert/extractive_summarization": BertSummarizationArgs,
    "esm2": Esm2Args,
}
"""Each registered name's schema."""


def build_bert(name: str, arguments: dict[str, Any]) -> Any:
    """The model ``name`` from its keys as written (validated, defaults filled in)."""
    keys = validated_arguments(BERT_SCHEMAS[name], arguments, owner=name)
    if name in ("bert", "esm2"):
        nsp = not keys["disable_nsp"]
        settings = resolve_bert(keys, pretraining=True, pooler=nsp)
        weight = float(number(keys["mlm_loss_weight"]) or 0.0)
        return BertPretrainingModel(
            settings, name, keys, nsp=nsp, mlm_loss_weight=weight, num_classes=keys["num_classes"]
        )
    settings = resolve_bert(keys, pretraining=False, pooler=name == "bert/classifier")
    model_class = {
        "bert/classifier": BertClassifierModel,
        "bert/token_classifier": BertTokenClassifierModel,
        "bert/extractive_summarization": BertSummarizationModel,
    }[name]
    return model_class(settings, name, keys)


def _constructor(name: str) -> Callable[..., Any]:
    def build(**arguments: Any) -> Any:
        return build_bert(name, arguments)

    build.__name__ = build.__qualname__ = name.replace("/", "_")
    build.__doc__ = f"Model Zoo's {name!r} model (keys: {BERT_SCHEMAS[name].__name__})."
    build.__signature__ = constructor_signature(BERT_SCHEMAS[name])  # type: ignore[attr-defined]
    return build


bert = _constructor("bert")
esm2 = _constructor("esm2")
bert_classifier = _constructor("bert/classifier")
bert_token_classifier = _constructor("bert/token_classifier")
bert_summarization = _constructor("bert/extractive_summarization")
