"""The BERT family and ESM-2 beyond Hugging Face parity: names, keys, masks, muP, losses.

``named_parameters()`` equals Model Zoo's lists; the schemas check as Model Zoo's configs do
(unknown keys at their line, numeric strings, deprecated and CSX-only keys warned about,
"not supported" values, files that must exist); VSL batches equal their sequences run alone;
muP scales the logits, attention and learning rates as Model Zoo does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.cli import main
from plugtrain.discovery.loading import get_registry
from plugtrain.errors import ConfigError
from plugtrain.schema import check_arguments
from plugtrain.testing import check_plugin_contract, write_run_file
from plugtrain_models.encoders.families_bert import build_bert
from plugtrain_models.encoders.schemas_bert import (
    BertArgs,
    BertClassifierArgs,
    BertTokenClassifierArgs,
    Esm2Args,
)

TINY = {
    "vocab_size": 40, "hidden_size": 16, "num_heads": 2, "num_hidden_layers": 2,
    "filter_size": 32, "max_position_embeddings": 24, "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
}  # fmt: skip
ESM = {**TINY, "position_embedding_type": "rotary", "rotary_dim": 8, "use_final_layer_norm": True,
       "embedding_layer_norm": False, "disable_nsp": True, "pad_token_id": 1}  # fmt: skip
WB = (".weight", ".bias")


def _encoder(prefix: str, *, positions: str | None, segments: bool, embed_ln: bool,
             final: bool, pooler: bool) -> list[str]:  # fmt: skip
    """Model Zoo's encoder names under ``prefix``, in module order."""
    names = [prefix + "embedding_layer.word_embeddings.weight"]
    if positions == "learned":
        names.append(prefix + "embedding_layer.position_embeddings.embed.weight")
    if segments:
        names.append(prefix + "embedding_layer.segment_embeddings.weight")
    if embed_ln:
        names += [prefix + "embed_ln_f" + s for s in WB]
    for n in range(2):
        layer = f"{prefix}transformer_encoder.layers.{n}."
        names += [f"{layer}self_attn.proj_{p}_dense_layer{s}" for p in ("q", "k", "v", "output")
                  for s in WB]  # fmt: skip
        names += [f"{layer}ffn.ffn.{i}.linear_layer{s}" for i in (0, 1) for s in WB]
        names += [f"{layer}norm{i}{s}" for i in (1, 2) for s in WB]
    if final:
        names += [prefix + "transformer_encoder.norm" + s for s in WB]
    if pooler:
        names += [prefix + "pooler.pooler.ffn.0.linear_layer" + s for s in WB]
    return names


MLM = [
    *(f"model.bert_mlm_head.mlm_transform.ffn.ffn.0.linear_layer{s}" for s in WB),
    *(f"model.bert_mlm_head.mlm_transform.ln{s}" for s in WB),
    "model.bert_mlm_head.classifier.ffn.0.linear_layer.bias",
]
NSP = [f"model.bert_cls_head.classifier.ffn.0.linear_layer{s}" for s in WB]
CLASSIFIER = [f"model.classifier{s}" for s in WB]
E, HEAD_E = "model.bert_encoder.", "model.bert."
EXPECTED = {
    "bert": (TINY, _encoder(E, positions="learned", segments=True, embed_ln=True, final=False,
                            pooler=True) + NSP + MLM),
    "roberta": ({**TINY, "disable_nsp": True, "mask_padding_in_positional_embed": True},
                _encoder(E, positions="learned", segments=False, embed_ln=True, final=False,
                         pooler=False) + MLM),
    "esm2": (ESM, _encoder(E, positions=None, segments=False, embed_ln=False, final=True,
                           pooler=False) + MLM),
    "bert/classifier": ({**TINY, "num_labels": 3, "problem_type": "regression",
                         "task_dropout": 0.1},
                        _encoder(HEAD_E, positions="learned", segments=True, embed_ln=True,
                                 final=False, pooler=True) + CLASSIFIER),
    "bert/token_classifier": ({**TINY, "num_classes": 4, "encoder_output_dropout_rate": 0.1},
                              _encoder(HEAD_E, positions="learned", segments=True,
                                       embed_ln=True, final=False, pooler=False) + CLASSIFIER),
    "bert/extractive_summarization": ({**TINY, "use_cls_bias": False},
                                      _encoder(HEAD_E, positions="learned", segments=True,
                                               embed_ln=True, final=False, pooler=False)
                                      + CLASSIFIER[:1]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EXPECTED))
def test_parameter_names_are_model_zoos(case: str) -> None:
    keys, names = EXPECTED[case]
    name = "bert" if case == "roberta" else case
    model = build_bert(name, dict(keys))
    assert [n for n, _ in model.named_parameters()] == names
    if name in ("bert", "esm2"):  # the tied decoder is in the state under both names
        state = model.state_dict()
        tied = "model.bert_mlm_head.classifier.ffn.0.linear_layer.weight"
        assert (
            state[tied].data_ptr() == state[E + "embedding_layer.word_embeddings.weight"].data_ptr()
        )


def test_a_checkpoint_with_either_tied_name_loads() -> None:
    model = build_bert("bert", dict(TINY))
    state = model.state_dict()
    del state["model.bert_mlm_head.classifier.ffn.0.linear_layer.weight"]
    model.load_state_dict(state)
    state = model.state_dict()
    del state[E + "embedding_layer.word_embeddings.weight"]
    model.load_state_dict(state)


def _problems(schema: type, keys: dict[str, Any]) -> str:
    return " | ".join(message for _, message in check_arguments(schema, keys))


@pytest.mark.parametrize(
    ("schema", "keys", "expected"),
    [
        (BertArgs, {"hiden_size": 8}, "unknown argument 'hiden_size'. Did you mean 'hidden_size'"),
        (BertArgs, {"hidden_size": 10, "num_heads": 4}, "not a multiple of num_heads"),
        (BertArgs, {"attention_module": "multiquery_attention"}, "is not supported"),
        (BertArgs, {"position_embedding_type": "alibi", "max_position_embeddings": 8},
         "'alibi' is not supported"),
        (BertArgs, {"position_embedding_type": "learned"}, "max_position_embeddings should be"),
        (BertArgs, {"max_position_embeddings": 8, "layer_norm_epsilon": "tiny"},
         "must be a number"),
        (BertArgs, {"max_position_embeddings": 8, "mup_base_hidden_size": 8},
         "give both mup_base_hidden_size and mup_base_filter_size"),
        (BertArgs, {"max_position_embeddings": 8, "encoder_nonlinearity": "swishy"},
         "unknown nonlinearity 'swishy'"),
        (Esm2Args, {"max_position_embeddings": 8, "token_dropout": True},
         "mask_token_id must be given"),
        (Esm2Args, {"position_embedding_type": "rotary", "rotary_dim": 7}, "rotary_dim must be"),
        (BertClassifierArgs, {"num_labels": 2, "task_dropout": 0.1, "problem_type": "ranking"},
         "problem_type 'ranking' is not one of"),
        (BertClassifierArgs, {"num_labels": 2}, "missing required argument 'problem_type'"),
    ],
)  # fmt: skip
def test_schema_rules(schema: type, keys: dict[str, Any], expected: str) -> None:
    assert expected in _problems(schema, keys)


def test_numeric_strings_are_coerced_as_model_zoo_does() -> None:
    keys = {**TINY, "layer_norm_epsilon": "1e-05", "dropout_rate": "0.0", "mlm_loss_weight": "0.5"}
    model = build_bert("bert", keys)
    assert model.model.bert_encoder.embed_ln_f.eps == 1e-5
    assert model.mlm_loss_weight == 0.5


def test_files_a_head_names_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"num_classes": 3, "encoder_output_dropout_rate": 0.0}
    missing = tmp_path / "label2id.json"
    found = _problems(BertTokenClassifierArgs, {**base, "label_vocab_file": str(missing)})
    assert f"Path {missing} does not exist." in found
    monkeypatch.delenv("MODELZOO_ROOT", raising=False)
    written = "$MODELZOO_ROOT/models/vocab/labels.json"
    found = _problems(BertTokenClassifierArgs, {**base, "label_vocab_file": written})
    assert "$MODELZOO_ROOT" in found
    assert "not set" in found
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "labels.json").write_text("{}")
    monkeypatch.setenv("MODELZOO_ROOT", str(tmp_path))
    assert _problems(BertTokenClassifierArgs, {**base, "label_vocab_file": written.replace(
        "vocab/", "")}) == ""  # fmt: skip


RUN = """\
trainer:
  init:
    backend: {{backend_type: CPU}}
    model:
{model}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 1}}
  fit:
    train_dataloader: {{StdlibText: {{batch_size: 2, block_size: 8}}}}
"""


def test_check_points_at_an_unknown_key_and_warns_about_deprecated_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["name: bert/classifier", "num_labels: 2", "task_dropout: 0.1",
             "problem_type: single_label_classification", "mlm_loss_weight: 0.1",
             "attention_kernel: flash"]  # fmt: skip
    model = "\n".join(f"      {x}" for x in [*lines, "filter_sise: 8"])
    path = write_run_file(tmp_path / "bad", RUN.format(model=model))
    assert main(["check", str(path)]) != 0
    err = capsys.readouterr().err
    assert f"{path}:11:7: trainer.init.model.bert/classifier.filter_sise: unknown" in err
    assert "Did you mean 'filter_size'" in err
    path = write_run_file(tmp_path, RUN.format(model="\n".join(f"      {x}" for x in lines)))
    assert main(["check", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"{path}:9:7: trainer.init.model.bert/classifier.mlm_loss_weight: has no effect" in err
    assert f"{path}:10:7: trainer.init.model.bert/classifier.attention_kernel: has no effect" in err


def test_python_construction_checks_as_a_run_file_does() -> None:
    with pytest.raises(ConfigError, match="unknown argument 'hiden_size'"):
        build_bert("bert", {**TINY, "hiden_size": 8})


def _packed(name: str, keys: dict[str, Any]) -> None:
    """Two sequences packed in one VSL row give what each gives alone."""
    torch.manual_seed(0)
    model = build_bert(name, keys).eval()
    ids = torch.randint(2, 40, (1, 14))
    lengths = (6, 8)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    span = torch.cat([torch.arange(n - 1, -1, -1) for n in lengths])[None]
    mask = torch.ones_like(ids)
    packed = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids,
              "attention_span": span}  # fmt: skip
    with torch.no_grad():
        together = model.logits(packed)["mlm_logits"]
        first = model.logits({"input_ids": ids[:, :6], "attention_mask": mask[:, :6]})
        second = model.logits({"input_ids": ids[:, 6:], "attention_mask": mask[:, 6:]})
    alone = torch.cat([first["mlm_logits"], second["mlm_logits"]], dim=1)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_vsl_rows_attend_within_each_sequence_with_restarted_positions() -> None:
    _packed("esm2", dict(ESM))
    _packed("bert", {**TINY, "disable_nsp": True})


def test_mup_scales_logits_attention_init_and_learning_rates() -> None:
    mup = {**TINY, "hidden_size": 32, "filter_size": 64, "mup_base_hidden_size": 16,
           "mup_base_filter_size": 16, "output_logits_alpha": 3.0, "embeddings_scale": 2.0,
           "attention_logits_alpha": 0.5}  # fmt: skip
    torch.manual_seed(0)
    model = build_bert("bert", mup)
    s = model.bert_settings
    assert s.output_logits_scale == 3.0 / 2
    attn = model.model.bert_encoder.transformer_encoder.layers[0].self_attn
    assert attn.scale == pytest.approx(0.5 / 16)  # 1/d (scale_qk_dot_by_d under muP) * alpha
    assert model.learning_rate_factors() == {
        "encoder_attention": 0.5, "encoder_input_ffn": 0.5, "pooler": 0.5,
        "encoder_output_ffn": 0.25,
    }  # fmt: skip
    ffn_out = model.model.bert_encoder.transformer_encoder.layers[0].ffn.ffn[1].linear_layer
    depth = 1 / math.sqrt(2 * 2)
    assert ffn_out.weight.std().item() == pytest.approx(0.02 * 0.88 * depth / 2, rel=0.25)
    plain = build_bert("bert", {**TINY, "hidden_size": 32, "filter_size": 64})
    assert plain.learning_rate_factors() == {}
    assert plain.model.bert_encoder.transformer_encoder.layers[0].self_attn.scale == 0.25
    batch = {"input_ids": torch.randint(1, 40, (2, 8)), "token_type_ids": torch.zeros(2, 8).long()}
    with torch.no_grad():
        plain.load_state_dict(model.state_dict())
        mlm = model.logits(batch)["mlm_logits"]
        hidden, _ = model.model.bert_encoder(batch["input_ids"], None, batch["token_type_ids"])
    torch.testing.assert_close(mlm, model.model.bert_mlm_head(hidden) * 1.5)


def test_initialisation_is_model_zoos() -> None:
    torch.manual_seed(0)
    model = build_bert(
        "bert/classifier",
        {
            **TINY,
            "hidden_size": 64,
            "num_labels": 2,
            "problem_type": "regression",
            "task_dropout": 0.0,
        },
    )
    encoder = model.model.bert
    words = encoder.embedding_layer.word_embeddings.weight
    assert torch.equal(words[0], torch.zeros(64))  # the padding row
    assert words.abs().max() <= 0.04  # truncated at two standard deviations
    assert words.std().item() == pytest.approx(0.02 * 0.88, rel=0.1)
    assert torch.equal(encoder.embed_ln_f.weight, torch.ones(64))
    assert model.model.classifier.weight.abs().max() > 0.04  # normal(0, 0.02), not truncated


def test_losses_follow_the_heads_rules() -> None:
    torch.manual_seed(0)
    ids = torch.randint(1, 40, (2, 6))
    regression = build_bert("bert/classifier", {**TINY, "num_labels": 1,
                            "problem_type": "regression", "task_dropout": 0.0}).eval()  # fmt: skip
    labels = torch.tensor([0.5, -1.0])
    out = regression({"input_ids": ids, "labels": labels})
    logits = regression.logits({"input_ids": ids})["logits"]
    torch.testing.assert_close(out["loss"], ((logits[:, 0] - labels) ** 2).mean())
    token = build_bert(
        "bert/token_classifier",
        {
            **TINY,
            "num_classes": 3,
            "encoder_output_dropout_rate": 0.0,
            "include_padding_in_loss": True,
        },
    ).eval()
    labels = torch.randint(0, 3, (2, 6))
    loss_mask = torch.ones(2, 6)
    out = token({"input_ids": ids, "labels": labels, "loss_mask": loss_mask})
    logits = token.logits({"input_ids": ids})["logits"]
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
    torch.testing.assert_close(out["loss"], ce / 2 / 6)
    assert out["num_examples"] == 2


def test_mlm_loss_scale_replaces_the_weight() -> None:
    torch.manual_seed(0)
    model = build_bert("bert", {**TINY, "disable_nsp": True, "mlm_loss_weight": 0.1}).eval()
    batch = {"input_ids": torch.randint(1, 40, (2, 8)), "masked_lm_positions": torch.tensor(
        [[1, 2], [3, 4]]), "masked_lm_mask": torch.ones(2, 2), "labels": torch.tensor([[5, 6],
        [7, 8]])}  # fmt: skip
    weighted = model(batch)["loss"]
    scaled = model({**batch, "mlm_loss_scale": torch.full((2, 2), 0.1)})["loss"]
    torch.testing.assert_close(weighted, scaled)
    unweighted = model({**batch, "mlm_loss_scale": torch.ones(2, 2)})["loss"]
    torch.testing.assert_close(unweighted * 0.1, weighted)


def test_a_training_step_under_bfloat16_autocast() -> None:
    torch.manual_seed(0)
    model = build_bert("esm2", {**ESM, "token_dropout": True, "mask_token_id": 39,
                                "dropout_rate": 0.1})  # fmt: skip
    ids = torch.randint(2, 39, (2, 8))
    ids[0, 3] = 39
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones(2, 8),
        "masked_lm_positions": torch.tensor([[3, 4], [1, 2]]),
        "masked_lm_mask": torch.ones(2, 2),
        "labels": torch.tensor([[5, 6], [7, 8]]),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch)
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_pretraining_metrics_are_model_zoos_and_skipped_when_unwanted() -> None:
    torch.manual_seed(0)
    model = build_bert("bert", dict(TINY)).eval()
    batch = {
        "input_ids": torch.randint(1, 40, (2, 8)),
        "token_type_ids": torch.zeros(2, 8, dtype=torch.long),
        "masked_lm_positions": torch.tensor([[1, 2], [3, 4]]),
        "masked_lm_mask": torch.tensor([[1, 1], [1, 0]]),
        "labels": torch.tensor([[5, 6], [7, 8]]),
        "next_sentence_label": torch.tensor([[0], [1]]),
    }
    with torch.no_grad():
        out = model(batch)
        logits = model.logits(batch)
    ce = torch.nn.functional.cross_entropy(
        logits["mlm_logits"].flatten(0, 1), batch["labels"].flatten(), reduction="none"
    )
    mean = (ce * batch["masked_lm_mask"].flatten()).sum() / 3
    torch.testing.assert_close(out["mlm_perplexity"], torch.exp(mean))
    hits = logits["mlm_logits"].argmax(-1) == batch["labels"]
    expected = (hits * batch["masked_lm_mask"]).sum() / 3
    torch.testing.assert_close(out["accuracy_masked_lm"], expected.float())
    nsp = (logits["nsp_logits"].argmax(-1) == batch["next_sentence_label"][:, 0]).float().mean()
    torch.testing.assert_close(out["accuracy_cls"], nsp)
    model.train()
    assert set(model(batch)) == {"loss", "num_examples", "accuracy_masked_lm", "accuracy_cls"}
    model.metrics_wanted = False
    assert set(model(batch)) == {"loss", "num_examples"}
    quiet = build_bert("bert", {**TINY, "compute_eval_metrics": False}).eval()
    assert set(quiet(batch)) == {"loss", "num_examples"}


def test_label_smoothing_smooths_the_mlm_term_in_training_only() -> None:
    torch.manual_seed(0)
    keys = {**TINY, "disable_nsp": True, "label_smoothing": "0.1"}
    model = build_bert("bert", keys)
    batch = {
        "input_ids": torch.randint(1, 40, (2, 8)),
        "masked_lm_positions": torch.tensor([[1, 2], [3, 4]]),
        "masked_lm_mask": torch.tensor([[1, 1], [1, 0]]),
        "labels": torch.tensor([[5, 6], [7, 8]]),
    }
    logits = model.logits(batch)["mlm_logits"].flatten(0, 1)
    ce = torch.nn.functional.cross_entropy(logits, batch["labels"].flatten(), reduction="none")
    uniform = -torch.log_softmax(logits, -1).mean(-1)
    weights = batch["masked_lm_mask"].flatten()
    smoothed = ((0.9 * ce + 0.1 * uniform) * weights).sum() / 2
    torch.testing.assert_close(model(batch)["loss"], smoothed)
    torch.testing.assert_close(model.eval()(batch)["loss"], (ce * weights).sum() / 2)


@pytest.mark.slow  # the contract builds every model of the plugin, T5 at its default size too
def test_the_five_models_keep_the_plugin_contract() -> None:
    """Listed, importable, schema = signature, torch-free schemas, and a state round trip."""
    registry = get_registry()
    names = ["bert", "esm2", "bert/classifier", "bert/token_classifier",
             "bert/extractive_summarization"]  # fmt: skip
    assert set(names) <= set(registry.names("model"))
    arguments = {
        "bert": TINY,
        "esm2": ESM,
        "bert/classifier": {**TINY, "num_labels": 2, "problem_type": "regression",
                            "task_dropout": 0.0},
        "bert/token_classifier": {**TINY, "num_classes": 3, "encoder_output_dropout_rate": 0.0},
        "bert/extractive_summarization": TINY,
    }  # fmt: skip
    problems = check_plugin_contract("encoders", registry, arguments=arguments)
    assert [p for p in problems if any(f"'{name}'" in p for name in names)] == []


@pytest.mark.parametrize(
    ("name", "extra"),
    [("bert", {}), ("bert", {"share_embedding_weights": False}), ("esm2", ESM),
     ("bert/classifier", {"num_labels": 2, "problem_type": "regression", "task_dropout": 0.0})],
)  # fmt: skip
def test_a_meta_build_filled_by_init_weights_equals_a_whole_build(
    name: str, extra: dict[str, Any]
) -> None:
    """What FSDP2 does: build on ``meta``, materialise, ``init_weights()`` (same draws)."""
    from plugtrain_backends._meta_init import materialise

    keys = {**TINY, **extra}
    torch.manual_seed(3)
    whole = build_bert(name, keys)
    after_whole = torch.get_rng_state()
    torch.manual_seed(3)
    with torch.device("meta"):
        empty = build_bert(name, keys)
    materialise(empty, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), after_whole)
    expected, filled = whole.state_dict(), empty.state_dict()
    assert [k for k in expected if not torch.equal(expected[k], filled[k])] == []


def test_fsdp_units_are_the_encoder_layers() -> None:
    from plugtrain_backends._fsdp import sharded_units

    for name, keys in (
        ("bert", TINY),
        ("bert/token_classifier", EXPECTED["bert/token_classifier"][0]),
    ):
        model = build_bert(name, dict(keys))
        prefix = "model.bert_encoder" if name == "bert" else "model.bert"
        expected = [f"{prefix}.transformer_encoder.layers.{n}" for n in range(2)]
        assert sharded_units(model, model.fsdp_modules) == expected


def test_list_model_shows_the_model_zoo_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "model", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    for name in ("bert", "bert/classifier", "bert/token_classifier",
                 "bert/extractive_summarization", "esm2"):  # fmt: skip
        assert listed[name]["provider"] == "plugtrain-models"
    assert main(["list", "checkpoint_converter", "--json"]) == 0
    converters = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert {"bert", "bert-sequence-classifier", "bert-token-classifier", "roberta",
            "esm-2"} <= converters  # fmt: skip
