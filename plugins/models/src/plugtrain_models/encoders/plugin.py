"""The hook implementations of the ``encoders`` plugin of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

BERT_MODELS = (
    ("bert", "bert", "BertArgs"),
    ("bert/classifier", "bert_classifier", "BertClassifierArgs"),
    ("bert/token_classifier", "bert_token_classifier", "BertTokenClassifierArgs"),
    ("bert/extractive_summarization", "bert_summarization", "BertSummarizationArgs"),
    ("esm2", "esm2", "Esm2Args"),
)
"""The BERT family and ESM-2: registry name, constructor in ``families_bert``, schema."""
BERT_CONVERTERS = (
    ("bert", "converters_bert:BERT"),
    ("bert-sequence-classifier", "converters_bert:BERT_SEQUENCE_CLASSIFIER"),
    ("bert-token-classifier", "converters_bert:BERT_TOKEN_CLASSIFIER"),
    ("roberta", "converters_bert:ROBERTA"),
    ("esm-2", "converters_esm:ESM2"),
)
"""The BERT family's and ESM-2's converters: Model Zoo's key, declaration under ``encoders``."""


@hookimpl
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's text encoders and encoder-decoders under their Model Zoo names."""
    for name, attribute, schema in BERT_MODELS:
        target = f"plugtrain_models.encoders.families_bert:{attribute}"
        registry.register(name, target, schema=f"plugtrain_models.encoders.schemas_bert:{schema}")
    t5_schema = "plugtrain_models.encoders.schemas_t5:T5Args"
    for name, attribute in (("t5", "t5"), ("transformer", "transformer")):
        target = f"plugtrain_models.encoders.t5_model:{attribute}"
        registry.register(name, target, schema=t5_schema)
    registry.register(
        "T5ForConditionalGeneration",
        "plugtrain_models.encoders.t5_model:T5ForConditionalGeneration",
        schema=t5_schema,
        summary="Deprecated name of t5 (Model Zoo's): write name: t5",
    )
    dpr_schema = "plugtrain_models.encoders.schemas_dpr:DprArgs"
    registry.register("dpr", "plugtrain_models.encoders.dpr:dpr", schema=dpr_schema)


@hookimpl
def plugtrain_register_checkpoint_converters(registry: ComponentRegistrar) -> None:
    """Register the Hugging Face converters of the encoder families under Model Zoo's keys."""
    from plugtrain.conversion.declaration import ConverterArguments

    for key, target in BERT_CONVERTERS:
        registry.register(
            key,
            f"plugtrain_models.encoders.{target}",
            schema=ConverterArguments,
            summary=f"Hugging Face <-> plugtrain checkpoints of {key}",
        )
    ours = (
        ("t5", "convert_t5:T5"),
        ("transformer", "convert_t5:TRANSFORMER"),
        ("dpr", "convert_dpr:DPR"),
    )
    for key, target in ours:
        registry.register(
            key,
            f"plugtrain_models.encoders.{target}",
            schema=ConverterArguments,
            summary=f"Hugging Face <-> plugtrain checkpoints of {key}",
        )
