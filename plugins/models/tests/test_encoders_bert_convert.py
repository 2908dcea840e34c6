"""The converters ``bert``, ``bert-sequence-classifier``, ``bert-token-classifier``, ``roberta``
and ``esm-2``: Hugging Face -> plugtrain -> Hugging Face.

For each key a tiny random HF model is saved with ``save_pretrained``; the converted state, in the
model built from the converted section, gives the HF outputs; the export holds every tensor of
the original files bit-equal (ESM's contact head and buffers aside), loads with
``from_pretrained`` and gives the same outputs; its ``config.json`` converts back to the same
section. One fat test drives ``plugtrain checkpoint convert`` both ways.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import load_file
from support.hf_models import random_hf_model, save_hf

from plugtrain.cli import main
from plugtrain.conversion import (
    ConfigMismatchError,
    ConversionError,
    export_hf,
    hf_to_plugtrain,
    open_checkpoint,
    read_checkpoint,
)
from plugtrain.discovery.loading import get_registry

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

B, S = 2, 16
HF_TINY = {
    "vocab_size": 96, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
    "intermediate_size": 64, "max_position_embeddings": 32, "hidden_act": "gelu",
    "layer_norm_eps": 1e-5, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
}  # fmt: skip
POSITIONS = torch.tensor([[1, 4, 9, 15], [2, 3, 7, 10]])


def _gathered(logits: torch.Tensor) -> torch.Tensor:
    return torch.gather(logits, 1, POSITIONS[..., None].expand(-1, -1, logits.shape[-1]))


def _batch(vocab: int, low: int, padded: bool) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(low, vocab, (B, S), generator=generator)
    mask = torch.ones(B, S, dtype=torch.long)
    if padded:
        mask[1, 11:] = 0
        ids[1, 11:] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, 8:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types * mask}


Outputs = dict[str, torch.Tensor]


def _pretraining(hf: Any, batch: Outputs) -> Outputs:
    out = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return {
        "mlm_logits": _gathered(out.prediction_logits),
        "nsp_logits": out.seq_relationship_logits,
    }


def _masked_lm(hf: Any, batch: Outputs) -> Outputs:
    return {"mlm_logits": _gathered(hf(batch["input_ids"], batch["attention_mask"]).logits)}


def _logits(hf: Any, batch: Outputs) -> Outputs:
    out = hf(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    return {"logits": out if out.ndim == 2 else out * batch["attention_mask"][..., None]}


class Case:
    """One converter key: its HF class and config, a batch, and how to read the outputs."""

    def __init__(
        self, config: Any, model: Any, outputs: Callable[[Any, Outputs], Outputs],
        batch: Outputs, **extra: Any,
    ) -> None:  # fmt: skip
        self.config, self.model, self.outputs, self.batch = config, model, outputs, batch
        self.extra = extra


CASES = {
    "bert": Case(transformers.BertConfig, transformers.BertForPreTraining, _pretraining,
                 {**_batch(96, 1, True), "masked_lm_positions": POSITIONS}),
    "bert-sequence-classifier": Case(
        transformers.BertConfig, transformers.BertForSequenceClassification, _logits,
        _batch(96, 1, True), num_labels=3, problem_type="single_label_classification",
    ),
    "bert-token-classifier": Case(
        transformers.BertConfig, transformers.BertForTokenClassification, _logits,
        _batch(96, 1, True), num_labels=5,
    ),
    "roberta": Case(
        transformers.RobertaConfig, transformers.RobertaForMaskedLM, _masked_lm,
        {**_batch(96, 1, True), "masked_lm_positions": POSITIONS},
        max_position_embeddings=33, pad_token_id=0, type_vocab_size=1,
    ),
    "esm-2": Case(
        transformers.EsmConfig, transformers.EsmForMaskedLM, _masked_lm,
        {**_batch(32, 4, False), "masked_lm_positions": POSITIONS},
        vocab_size=33, position_embedding_type="rotary", token_dropout=True, mask_token_id=32,
        pad_token_id=1, emb_layer_norm_before=False,
    ),
}  # fmt: skip
CASES["esm-2"].batch["input_ids"][0, [2, 5, 9]] = 32
CASES_NAMES = {
    "bert": "bert", "bert-sequence-classifier": "bert/classifier",
    "bert-token-classifier": "bert/token_classifier", "roberta": "bert", "esm-2": "esm2",
}  # fmt: skip
NOT_KEPT = ("esm.contact_head.", "inv_freq")
"""Tensors without a Model Zoo counterpart: the contact head (zeros on export) and buffers."""


def _saved(key: str, folder: Path) -> tuple[Any, Path]:
    case = CASES[key]
    hf = random_hf_model(case.config, case.model, **{**HF_TINY, **case.extra})
    if key == "roberta":  # Model Zoo's RoBERTa has no segment table: a zero row round-trips
        with torch.no_grad():
            hf.roberta.embeddings.token_type_embeddings.weight.zero_()
    return hf, save_hf(hf, folder / key)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update(load_file(file))
    return found


def _ours(converted: Any) -> Any:
    model = get_registry().resolve("model", converted.model_name)(**converted.model_keys)
    model.load_state_dict(converted.state)
    return model.eval()


def _outputs_of(model: Any, batch: Outputs) -> Outputs:
    with torch.no_grad():
        out = model.logits(batch)
    if "logits" in out and out["logits"].ndim == 3:
        out["logits"] = out["logits"] * batch["attention_mask"][..., None]
    return dict(out)


def _assert_outputs(ours: Outputs, theirs: Outputs) -> None:
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("key", list(CASES))
def test_round_trip_is_bit_equal_and_gives_the_hf_outputs(key: str, tmp_path: Path) -> None:
    hf, folder = _saved(key, tmp_path)
    case = CASES[key]
    converted = hf_to_plugtrain(folder, key)
    model = _ours(converted)
    with torch.no_grad():
        reference = case.outputs(hf, case.batch)
    _assert_outputs(_outputs_of(model, case.batch), reference)

    exported = export_hf(model.state_dict(), key, converted.model_keys, tmp_path / "out")
    original, written = _tensors(folder), _tensors(exported)
    kept = {n: t for n, t in original.items() if not n.startswith(NOT_KEPT) and "inv_freq" not in n}
    assert kept
    for name, tensor in kept.items():
        assert written[name].dtype == tensor.dtype, name
        assert torch.equal(written[name], tensor), name
    assert not set(written) - set(original)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = case.model.from_pretrained(exported, attn_implementation="eager").eval()
    with torch.no_grad():
        _assert_outputs(case.outputs(loaded, case.batch), reference)
    assert hf_to_plugtrain(exported, key).model_keys == converted.model_keys


def test_sections_name_the_registered_models(tmp_path: Path) -> None:
    names = {key: hf_to_plugtrain(_saved(key, tmp_path)[1], key).model_name for key in CASES}
    assert names == CASES_NAMES
    keys = hf_to_plugtrain(tmp_path / "roberta", "roberta").model_keys
    assert (keys["disable_nsp"], keys["mask_padding_in_positional_embed"]) == (True, True)
    assert keys["max_position_embeddings"] == 32  # HF's 33 rows less the padding row
    esm = hf_to_plugtrain(tmp_path / "esm-2", "esm-2").model_keys
    assert (esm["rotary_dim"], esm["token_dropout"], esm["mask_token_id"]) == (8, True, 32)


@pytest.mark.parametrize("key", ["roberta", "esm-2", "bert-token-classifier"])
def test_a_model_opens_a_hugging_face_folder_with_its_own_converter(
    key: str, tmp_path: Path
) -> None:
    """What a fit does with a ``ckpt_path`` naming a Hugging Face folder."""
    hf, folder = _saved(key, tmp_path)
    keys = hf_to_plugtrain(folder, key).model_keys
    model = get_registry().resolve("model", CASES_NAMES[key])(**keys).eval()
    assert model.checkpoint_converter == key
    opened = open_checkpoint(
        folder, get_registry(), converter=model.checkpoint_converter, model_keys=model.model_keys
    )
    model.load_state_dict(read_checkpoint(opened).state)
    case = CASES[key]
    with torch.no_grad():
        _assert_outputs(_outputs_of(model, case.batch), case.outputs(hf, case.batch))
    other = get_registry().resolve("model", CASES_NAMES[key])(**{**keys, "num_hidden_layers": 1})
    with pytest.raises(ConfigMismatchError, match="num_hidden_layers"):
        open_checkpoint(folder, get_registry(), converter=key, model_keys=other.model_keys)


def test_what_does_not_convert_is_named(tmp_path: Path) -> None:
    _, folder = _saved("bert", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["position_embedding_type"] = "relative_key"
    other = tmp_path / "config.json"
    other.write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="position_embedding_type 'relative_key'"):
        hf_to_plugtrain(folder, "bert", config=other)
    converted = hf_to_plugtrain(folder, "bert")
    model = _ours(converted)
    mup = {**converted.model_keys, "mup_base_hidden_size": 16, "mup_base_filter_size": 32}
    with pytest.raises(ConversionError, match="mup_base_hidden_size"):
        export_hf(model.state_dict(), "bert", mup, tmp_path / "mup")


@pytest.mark.slow
def test_checkpoint_convert_both_ways_on_the_command_line(tmp_path: Path) -> None:
    hf, folder = _saved("bert", tmp_path)
    out = tmp_path / "plugtrain"
    command = ["checkpoint", "convert", str(folder), "--model", "bert", "--src-fmt", "hf",
               "--tgt-fmt", "plugtrain", "--config", str(folder / "config.json"),
               "--output-dir", str(out)]  # fmt: skip
    assert main(command) == 0
    (section_file,) = out.glob("*_to_plugtrain.yaml")
    section = yaml.safe_load(section_file.read_text())["model"]
    assert (section["name"], section["hidden_size"], section["num_segments"]) == ("bert", 32, 2)
    (checkpoint,) = out.glob("*_to_plugtrain.mdl")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    model = (
        get_registry()
        .resolve("model", "bert")(**{k: v for k, v in section.items() if k != "name"})
        .eval()
    )
    model.load_state_dict(state)
    case = CASES["bert"]
    with torch.no_grad():
        _assert_outputs(_outputs_of(model, case.batch), case.outputs(hf, case.batch))
    back = ["checkpoint", "convert", str(checkpoint), "--model", "bert", "--src-fmt", "plugtrain",
            "--tgt-fmt", "hf", "--config", str(section_file), "--output-dir", str(out)]  # fmt: skip
    assert main(back) == 0
    (exported,) = (p for p in out.iterdir() if p.is_dir() and p.name.endswith("_to_hf"))
    written = _tensors(exported)
    assert all(torch.equal(written[k], v) for k, v in _tensors(folder).items())


def test_old_files_with_gamma_and_beta_layer_norms_convert(tmp_path: Path) -> None:
    """Early BERT checkpoints name LayerNorm parameters ``gamma``/``beta``."""
    from safetensors.torch import save_file

    _, folder = _saved("bert", tmp_path)
    renamed = {
        name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                     "LayerNorm.beta"): t
        for name, t in _tensors(folder).items()
    }  # fmt: skip
    assert any(name.endswith("LayerNorm.gamma") for name in renamed)
    old = tmp_path / "old"
    old.mkdir()
    save_file(renamed, old / "model.safetensors")
    (old / "config.json").write_text((folder / "config.json").read_text())
    state, expected = hf_to_plugtrain(old, "bert").state, hf_to_plugtrain(folder, "bert").state
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], v) for k, v in expected.items())
