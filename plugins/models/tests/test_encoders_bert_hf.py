"""The BERT family and ESM-2 equal their Hugging Face twins (float32, eval, eager attention).

Each test builds the model through plugtrain from a tiny section, takes a tiny HF model whose
every parameter is N(0, 0.2) (norm weights + 1), copies the HF weights into ours by Model Zoo's
name mapping (written out here, independently of the converters), checks that every trainable
parameter of ours was set, and compares ``logits(batch)`` on a right-padded batch. The losses
of ``forward(batch)`` are compared with Model Zoo's formulas computed from the HF outputs.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import torch
from support.hf_models import random_hf_model
from torch.nn import functional

from plugtrain_models.encoders.families_bert import build_bert

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

V, H, NH, L, F, P, B, S = 96, 32, 4, 2, 64, 32, 2, 16
ATOL, RTOL = 1e-4, 1e-5
TINY = {
    "vocab_size": V,
    "hidden_size": H,
    "num_heads": NH,
    "num_hidden_layers": L,
    "filter_size": F,
    "max_position_embeddings": P,
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
    "layer_norm_epsilon": 1e-5,
    "pooler_nonlinearity": "tanh",
}
HF_TINY = {
    "vocab_size": V,
    "hidden_size": H,
    "num_attention_heads": NH,
    "num_hidden_layers": L,
    "intermediate_size": F,
    "max_position_embeddings": P,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "layer_norm_eps": 1e-5,
    "hidden_act": "gelu",
}

_LAYER = r"encoder\.layer\.(\d+)\."
_OURS_LAYER = r"transformer_encoder.layers.\1."
_RULES = [
    (r"embeddings\.word_embeddings", "embedding_layer.word_embeddings"),
    (r"embeddings\.position_embeddings", "embedding_layer.position_embeddings.embed"),
    (r"embeddings\.token_type_embeddings", "embedding_layer.segment_embeddings"),
    (r"embeddings\.LayerNorm", "embed_ln_f"),
    (_LAYER + r"attention\.self\.query", _OURS_LAYER + "self_attn.proj_q_dense_layer"),
    (_LAYER + r"attention\.self\.key", _OURS_LAYER + "self_attn.proj_k_dense_layer"),
    (_LAYER + r"attention\.self\.value", _OURS_LAYER + "self_attn.proj_v_dense_layer"),
    (_LAYER + r"attention\.output\.dense", _OURS_LAYER + "self_attn.proj_output_dense_layer"),
    (_LAYER + r"attention\.output\.LayerNorm", _OURS_LAYER + "norm1"),
    (_LAYER + r"attention\.LayerNorm", _OURS_LAYER + "norm1"),
    (_LAYER + r"intermediate\.dense", _OURS_LAYER + "ffn.ffn.0.linear_layer"),
    (_LAYER + r"output\.dense", _OURS_LAYER + "ffn.ffn.1.linear_layer"),
    (_LAYER + r"output\.LayerNorm", _OURS_LAYER + "norm2"),
    (_LAYER + r"LayerNorm", _OURS_LAYER + "norm2"),
    (r"encoder\.emb_layer_norm_after", "transformer_encoder.norm"),
    (r"pooler\.dense", "pooler.pooler.ffn.0.linear_layer"),
]
_HEADS = [
    (r"cls\.predictions\.transform\.dense", "bert_mlm_head.mlm_transform.ffn.ffn.0.linear_layer"),
    (r"cls\.predictions\.transform\.LayerNorm", "bert_mlm_head.mlm_transform.ln"),
    (r"cls\.predictions\.bias", "bert_mlm_head.classifier.ffn.0.linear_layer.bias"),
    (r"cls\.seq_relationship", "bert_cls_head.classifier.ffn.0.linear_layer"),
    (r"lm_head\.dense", "bert_mlm_head.mlm_transform.ffn.ffn.0.linear_layer"),
    (r"lm_head\.layer_norm", "bert_mlm_head.mlm_transform.ln"),
    (r"lm_head\.bias", "bert_mlm_head.classifier.ffn.0.linear_layer.bias"),
    (r"classifier", "classifier"),
]


def _our_name(hf_name: str, hf_prefix: str, encoder: str) -> str | None:
    """Model Zoo's name of an HF parameter (``None``: it has no counterpart)."""
    if hf_name.startswith(hf_prefix):
        rest = hf_name[len(hf_prefix) :]
        for pattern, replacement in _RULES:
            found = re.match(pattern + r"(\.\w+)$", rest)
            if found:
                return encoder + found.expand(replacement + found.group(found.lastindex or 0))
        return None
    for pattern, replacement in _HEADS:
        found = re.match(pattern + r"(\.\w+)?$", hf_name)
        if found:
            suffix = found.group(1) or ""
            return "model." + replacement + suffix
    return None


def _interleave(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """HF rotates halves of each head, Model Zoo adjacent pairs: row 2i <- i, 2i+1 <- i + d/2."""
    shaped = weight.reshape(heads, -1, *weight.shape[1:])
    half = shaped.shape[1] // 2
    out = torch.stack((shaped[:, :half], shaped[:, half:]), dim=2).flatten(1, 2)
    return out.reshape(weight.shape)


def _copied(
    hf: Any, hf_prefix: str, encoder: str, name: str, keys: dict[str, Any], skip: str = "^$"
) -> Any:
    """Our model ``name`` carrying ``hf``'s weights; every trainable parameter is set once.

    HF parameters matching ``skip`` have no counterpart (RoBERTa's zero segment row).
    """
    ours = build_bert(name, keys).eval()
    parameters = dict(ours.named_parameters())
    weights: dict[str, torch.Tensor] = {}
    for hf_name, tensor in hf.named_parameters():
        mapped = _our_name(hf_name, hf_prefix, encoder)
        if mapped is None or re.search(skip, hf_name):
            continue
        rotated = "esm" in hf_prefix and re.search(r"proj_[qk]_dense_layer", mapped)
        assert mapped not in weights, mapped
        weights[mapped] = _interleave(tensor, NH) if rotated else tensor
    trainable = {n for n, p in parameters.items() if p.requires_grad}
    assert set(weights) == trainable, set(weights) ^ trainable
    with torch.no_grad():
        for mapped, tensor in weights.items():
            parameters[mapped].copy_(tensor)
    return ours


def _batch(vocab: int = V, low: int = 1, padded: bool = True) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(low, vocab, (B, S), generator=generator)
    mask = torch.ones(B, S, dtype=torch.long)
    if padded:
        mask[1, 11:] = 0
        ids[1, 11:] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, 8:] = 1
    types = types * mask
    positions = torch.tensor([[1, 4, 9, 15], [2, 3, 7, 10]])
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": types,
        "masked_lm_positions": positions,
        "masked_lm_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "labels": torch.randint(0, vocab, (B, 4), generator=generator),
        "next_sentence_label": torch.tensor([[0], [1]]),
    }


def _gathered(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return torch.gather(logits, 1, positions[..., None].expand(-1, -1, logits.shape[-1]))


def _mlm_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], weight: float) -> torch.Tensor:
    per = functional.cross_entropy(
        logits.flatten(0, 1), batch["labels"].flatten(), reduction="none"
    )
    return (per * batch["masked_lm_mask"].flatten()).sum() / B * weight


def test_bert_pretraining_equals_bert_for_pretraining() -> None:
    hf = random_hf_model(transformers.BertConfig, transformers.BertForPreTraining, **HF_TINY)
    keys = {**TINY, "mlm_loss_weight": 0.058}
    ours = _copied(hf, "bert.", "model.bert_encoder.", "bert", keys)
    batch = _batch()
    with torch.no_grad():
        got = ours.logits(batch)
        want = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        loss = ours(batch)["loss"]
    mlm = _gathered(want.prediction_logits, batch["masked_lm_positions"])
    torch.testing.assert_close(got["mlm_logits"], mlm, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(
        got["nsp_logits"], want.seq_relationship_logits, atol=ATOL, rtol=RTOL
    )
    nsp = functional.cross_entropy(want.seq_relationship_logits, batch["next_sentence_label"][:, 0])
    torch.testing.assert_close(loss, _mlm_loss(mlm, batch, 0.058) + nsp, atol=ATOL, rtol=RTOL)


def test_bert_without_positions_gives_every_position() -> None:
    """A batch without ``masked_lm_positions`` gets the logits of all S positions."""
    hf = random_hf_model(transformers.BertConfig, transformers.BertForPreTraining, **HF_TINY)
    ours = _copied(hf, "bert.", "model.bert_encoder.", "bert", dict(TINY))
    keep = ("input_ids", "attention_mask", "token_type_ids")
    batch = {k: v for k, v in _batch().items() if k in keep}
    with torch.no_grad():
        got = ours.logits(batch)["mlm_logits"]
        want = hf(*(batch[k] for k in keep)).prediction_logits
    torch.testing.assert_close(got[0], want[0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got[1, :11], want[1, :11], atol=ATOL, rtol=RTOL)


def test_roberta_equals_roberta_for_masked_lm() -> None:
    hf = random_hf_model(
        transformers.RobertaConfig, transformers.RobertaForMaskedLM,
        **{**HF_TINY, "max_position_embeddings": P + 1, "pad_token_id": 0, "type_vocab_size": 1},
    )  # fmt: skip
    with torch.no_grad():
        hf.roberta.embeddings.token_type_embeddings.weight.zero_()
    keys = {**TINY, "disable_nsp": True, "mask_padding_in_positional_embed": True}
    ours = _copied(hf, "roberta.", "model.bert_encoder.", "bert", keys, skip="token_type")
    batch = _batch()
    del batch["token_type_ids"], batch["next_sentence_label"]
    with torch.no_grad():
        got = ours.logits(batch)
        want = hf(batch["input_ids"], batch["attention_mask"]).logits
        loss = ours(batch)["loss"]
    assert set(got) == {"mlm_logits"}
    mlm = _gathered(want, batch["masked_lm_positions"])
    torch.testing.assert_close(got["mlm_logits"], mlm, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(loss, _mlm_loss(mlm, batch, 1.0), atol=ATOL, rtol=RTOL)


ESM_KEYS = {
    **TINY,
    "vocab_size": 33,
    "position_embedding_type": "rotary",
    "rotary_dim": H // NH,
    "token_dropout": True,
    "mask_token_id": 32,
    "pad_token_id": 1,
    "use_final_layer_norm": True,
    "embedding_layer_norm": False,
    "disable_nsp": True,
    "mlm_nonlinearity": "gelu",
}


def test_esm2_equals_esm_for_masked_lm() -> None:
    hf = random_hf_model(
        transformers.EsmConfig, transformers.EsmForMaskedLM,
        **{**HF_TINY, "vocab_size": 33, "position_embedding_type": "rotary",
           "token_dropout": True, "mask_token_id": 32, "pad_token_id": 1,
           "emb_layer_norm_before": False},
    )  # fmt: skip
    ours = _copied(hf, "esm.", "model.bert_encoder.", "esm2", dict(ESM_KEYS))
    batch = _batch(vocab=32, low=4, padded=False)
    batch["input_ids"][0, [2, 5, 9]] = 32  # three mask tokens in one row, none in the other
    del batch["token_type_ids"], batch["next_sentence_label"]
    with torch.no_grad():
        got = ours.logits(batch)["mlm_logits"]
        want = hf(batch["input_ids"], batch["attention_mask"]).logits
        loss = ours(batch)["loss"]
    mlm = _gathered(want, batch["masked_lm_positions"])
    torch.testing.assert_close(got, mlm, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(loss, _mlm_loss(mlm, batch, 1.0), atol=ATOL, rtol=RTOL)


def test_sequence_classifier_equals_bert_for_sequence_classification() -> None:
    hf = random_hf_model(
        transformers.BertConfig, transformers.BertForSequenceClassification,
        **HF_TINY, num_labels=3,
    )  # fmt: skip
    keys = {**TINY, "num_labels": 3, "problem_type": "single_label_classification",
            "task_dropout": 0.0}  # fmt: skip
    ours = _copied(hf, "bert.", "model.bert.", "bert/classifier", keys)
    batch = _batch()
    batch["labels"] = torch.tensor([2, 0])
    with torch.no_grad():
        got = ours.logits(batch)["logits"]
        want = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        loss = ours(batch)["loss"]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(loss, functional.cross_entropy(want, batch["labels"]))


def test_token_classifier_equals_bert_for_token_classification() -> None:
    hf = random_hf_model(
        transformers.BertConfig, transformers.BertForTokenClassification, **HF_TINY, num_labels=5
    )
    keys = {**TINY, "num_classes": 5, "encoder_output_dropout_rate": 0.0, "loss_weight": 0.5}
    ours = _copied(hf, "bert.", "model.bert.", "bert/token_classifier", keys)
    batch = _batch()
    batch["labels"] = torch.randint(0, 5, (B, S), generator=torch.Generator().manual_seed(4))
    batch["loss_mask"] = batch["attention_mask"]
    with torch.no_grad():
        got = ours.logits(batch)["logits"]
        want = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        loss = ours(batch)["loss"]
    torch.testing.assert_close(got[0], want[0], atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got[1, :11], want[1, :11], atol=ATOL, rtol=RTOL)
    per = functional.cross_entropy(want.flatten(0, 1), batch["labels"].flatten(), reduction="none")
    expected = (per * batch["loss_mask"].flatten()).sum() / B * 0.5
    torch.testing.assert_close(loss, expected, atol=ATOL, rtol=RTOL)


def test_summarization_equals_bert_model_and_its_classifier() -> None:
    def headless(config: Any) -> Any:
        return transformers.BertModel(config, add_pooling_layer=False)

    hf = random_hf_model(transformers.BertConfig, headless, **HF_TINY)
    keys = {**TINY, "loss_weight": 2.0}
    ours = build_bert("bert/extractive_summarization", keys).eval()
    hf_parameters = {f"bert.{n}": p for n, p in hf.named_parameters()}
    generator = torch.Generator().manual_seed(5)
    classifier = torch.nn.Linear(H, 2)
    with torch.no_grad():
        classifier.weight.normal_(0, 0.2, generator=generator)
        classifier.bias.normal_(0, 0.2, generator=generator)
        hf_parameters.update(
            {"classifier.weight": classifier.weight, "classifier.bias": classifier.bias}
        )
        parameters = dict(ours.named_parameters())
        mapped = {_our_name(n, "bert.", "model.bert."): t for n, t in hf_parameters.items()}
        assert set(mapped) == set(parameters)
        for name, tensor in mapped.items():
            parameters[name].copy_(tensor)  # type: ignore[index]
    batch = _batch()
    batch["cls_indices"] = torch.tensor([[0, 6, 12], [0, 5, 0]])
    batch["cls_weights"] = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    batch["labels"] = torch.tensor([[1, 0, 1], [0, 1, 0]])
    with torch.no_grad():
        got = ours.logits(batch)["logits"]
        hidden = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        want = classifier(_gathered(hidden.last_hidden_state, batch["cls_indices"]))
        loss = ours(batch)["loss"]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    per = functional.cross_entropy(want.flatten(0, 1), batch["labels"].flatten(), reduction="none")
    expected = (per * batch["cls_weights"].flatten()).sum() / B * 2.0
    torch.testing.assert_close(loss, expected, atol=ATOL, rtol=RTOL)
