"""Model Zoo 2.10's 23 encoder and encoder-decoder run files check as written and train.

``data/modelzoo_encoders/`` holds the files of ``models/nlp/{bert,esm2,dpr,t5,transformer}``
as Cerebras wrote them. Each must pass ``plugtrain check`` unchanged, with ``MODELZOO_ROOT``
set to a folder holding the vocabularies it names and Model Zoo-format data at the very paths
it names (relative to the working directory); then train 10 steps on CPU with only the
acceptance's shrinking (sizes, sequence lengths at most 128, batch 4, no workers, CPU, 10
steps) and log a finite loss at every step.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from plugtrain.cli import main
from plugtrain_models.encoder_data import samples

CORPUS = Path(__file__).parent / "data" / "modelzoo_encoders"
FILES = sorted(CORPUS.rglob("*.yaml"))
NAMES = [str(path.relative_to(CORPUS)) for path in FILES]
NER_LABELS = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease", "X", "[PAD]"]


def test_the_corpus_is_model_zoos_23_files() -> None:
    families = {}
    for path in FILES:
        assert path.read_text().startswith("# Origin: Cerebras/modelzoo src/cerebras/modelzoo/")
        name = yaml.safe_load(path.read_text())["trainer"]["init"]["model"]["name"]
        families[name] = families.get(name, 0) + 1
    assert families == {
        "bert": 5, "bert/classifier": 4, "bert/token_classifier": 1,
        "bert/extractive_summarization": 2, "esm2": 5, "dpr": 1, "t5": 3, "transformer": 2,
    }  # fmt: skip


def _loaders(trainer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    fit = trainer.get("fit") or {}
    for key in ("train_dataloader", "val_dataloader"):
        if fit.get(key):
            yield fit[key]
    if (trainer.get("validate") or {}).get("val_dataloader"):
        yield trainer["validate"]["val_dataloader"]
    every = (trainer.get("validate_all") or {}).get("val_dataloaders") or []
    yield from [every] if isinstance(every, dict) else every


def _here(path: str) -> Path:
    return Path(os.path.expandvars(path))


def _write_data(loader: dict[str, Any], model: dict[str, Any]) -> None:
    """Model Zoo-format data (and vocabularies) at the paths ``loader`` names."""
    kind = loader["data_processor"]
    vocab = loader.get("vocab_file") or model.get("vocab_file")
    if vocab and kind not in ("T5DynamicDataProcessor", "TransformerDynamicDataProcessor"):
        samples.write_vocab(_here(vocab))
    folder = _here(str(loader.get("data_dir") or loader.get("src_data_dir")))
    msl = loader.get("max_sequence_length")
    if kind == "BertCSVDynamicMaskDataProcessor":
        samples.write_masked_csv(folder, 24, min(msl, 48))
    elif kind == "BertCSVDataProcessor":
        samples.write_premasked_csv(folder, 12, 32, 5)
    elif kind == "BertHDF5DataProcessor":
        samples.write_bert_hdf5(folder, 16, 32, 5, vsl=loader.get("use_vsl", False))
    elif kind == "BertTokenClassifierDataProcessor":
        samples.write_ner_csv(folder, 16, min(msl, 24), NER_LABELS)
    elif kind == "BertSumCSVDataProcessor":
        samples.write_bert_sum_csv(folder, 12, 64, 5, vocab_size=model["vocab_size"])
    elif kind in ("MNLIDataProcessor", "SST2DataProcessor"):
        samples.write_glue(folder, "mnli" if kind.startswith("MNLI") else "sst2", 12)
    elif kind == "DPRHDF5DataProcessor":
        samples.write_dpr_hdf5(folder, 16, 32, 2, vocab_size=model["q_encoder"]["vocab_size"])
    elif kind == "T5DynamicDataProcessor":
        samples.write_t5_text(folder, 24, vocab=_here(loader["src_vocab_file"]))
    elif kind == "TransformerDynamicDataProcessor":
        samples.write_transformer_text(folder, 24, vocab=_here(loader["src_vocab_file"]))
    else:  # pragma: no cover - the corpus test lists the processors
        raise AssertionError(kind)


def _prepare(path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("MODELZOO_ROOT", str(cwd / "modelzoo_root"))
    run = yaml.safe_load(path.read_text())
    trainer = run["trainer"]
    model = trainer["init"]["model"]
    for loader in _loaders(trainer):
        _write_data(loader, model)
    if model.get("label_vocab_file"):
        assert _here(model["label_vocab_file"]).is_file()
    return run


@pytest.mark.parametrize("name", NAMES)
def test_a_model_zoo_encoder_file_checks_as_written(name, tmp_path, monkeypatch, capsys) -> None:
    path = CORPUS / name
    _prepare(path, tmp_path, monkeypatch)
    status = main(["check", str(path)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert f"{path}: OK (1 trainer)" in captured.out


BERT_SIZES = {"hidden_size": 64, "num_heads": 4, "num_hidden_layers": 2, "filter_size": 128}
T5_SIZES = {
    "d_model": 64, "d_kv": 16, "num_heads": 4, "d_ff": 128, "encoder_num_hidden_layers": 2,
    "decoder_num_hidden_layers": 2,
}  # fmt: skip


SEQUENCE_CAP = 128
"""Sequence lengths above this are cut to it, a size like the others: what goes is mostly
padding (the BERT-family samples :func:`_write_data` writes are at most 64 tokens, padded to up
to 1532 positions, which attention with dropout pays for quadratically on CPU); T5 and
Transformer text is cut into shorter sequences."""


def _shrunk_bert(section: dict[str, Any]) -> None:
    section.update(BERT_SIZES)
    if section.get("rotary_dim") is not None:
        section["rotary_dim"] = 16
    if section.get("mup_base_hidden_size") is not None:
        section.update(mup_base_hidden_size=32, mup_base_filter_size=64)


def _shrunk(run: dict[str, Any], model_dir: str) -> dict[str, Any]:
    """The acceptance's shrinking and CPU settings, nothing else."""
    init = run["trainer"]["init"]
    model = init["model"]
    if model["name"] in ("t5", "transformer"):
        model.update(T5_SIZES)
        if model.get("mup_base_d_model") is not None:
            model.update(mup_base_d_model=32, mup_base_d_ff=64)
    elif model["name"] == "dpr":
        for key in ("q_encoder", "ctx_encoder", "encoder"):
            if key in model:
                _shrunk_bert(model[key])
    else:
        _shrunk_bert(model)
    init["backend"] = {"backend_type": "CPU"}
    init["model_dir"] = model_dir
    init["loop"].update(max_steps=10, eval_frequency=10, eval_steps=2)
    init.setdefault("logging", {})["log_steps"] = 1
    callbacks = [c for c in init.get("callbacks") or [] if "ComputeNorm" not in c]
    if "callbacks" in init:
        init["callbacks"] = callbacks
    for loader in _loaders(run["trainer"]):
        loader.update(batch_size=4, num_workers=0, shuffle_buffer=16)
        for key in ("max_sequence_length", "src_max_sequence_length", "tgt_max_sequence_length"):
            if (loader.get(key) or 0) > SEQUENCE_CAP:
                loader[key] = SEQUENCE_CAP
    for key in ("validate", "validate_all"):
        run["trainer"].pop(key, None)
    return run


def _train_losses(path: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    run = _shrunk(_prepare(path, cwd, monkeypatch), str(cwd / "model_dir"))
    written = cwd / "run.yaml"
    written.write_text(yaml.safe_dump(run, sort_keys=False), encoding="utf-8")
    assert main(["fit", str(written)]) == 0
    lines = (cwd / "model_dir" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [r["loss"] for r in records if r.get("split") == "train" and "loss" in r]


@pytest.mark.slow
def test_every_file_trains_ten_steps_on_cpu_with_a_finite_loss(tmp_path, monkeypatch) -> None:
    """All 23 in one process (in-process ``plugtrain fit``), each in its own folder."""
    failures = {}
    for name in NAMES:
        cwd = tmp_path / name.replace("/", "__")
        cwd.mkdir()
        losses = _train_losses(CORPUS / name, cwd, monkeypatch)
        if len(losses) != 10 or not all(math.isfinite(loss) for loss in losses):
            failures[name] = losses
    assert failures == {}


EXAMPLES = sorted(
    (Path(__file__).parents[3] / "examples").glob("modelzoo_*.yaml"),
)
ENCODER_EXAMPLES = [
    path for path in EXAMPLES if "runs/data/encoders" in path.read_text(encoding="utf-8")
]


def test_the_laptop_examples_check_on_their_sample_data(tmp_path, monkeypatch, capsys) -> None:
    """One example per family, on the data ``python -m ...encoder_data.samples`` writes."""
    monkeypatch.chdir(tmp_path)
    samples.write_examples("runs/data/encoders")
    names = set()
    for path in ENCODER_EXAMPLES:
        assert main(["check", str(path)]) == 0, capsys.readouterr().err
        assert f"{path}: OK (1 trainer)" in capsys.readouterr().out
        names.add(yaml.safe_load(path.read_text())["trainer"]["init"]["model"]["name"])
    assert names == {
        "bert", "bert/classifier", "bert/token_classifier", "bert/extractive_summarization",
        "esm2", "dpr", "t5", "transformer",
    }  # fmt: skip


@pytest.mark.slow
def test_a_resumed_bert_fit_sees_the_masks_of_an_uninterrupted_one(tmp_path, monkeypatch) -> None:
    """``plugtrain fit`` stopped at step 4 and resumed to 8 logs the losses of one run to 8."""
    monkeypatch.chdir(tmp_path)
    samples.write_examples("runs/data/encoders")
    example = Path(__file__).parents[3] / "examples" / "modelzoo_bert.yaml"
    run = yaml.safe_load(example.read_text())
    init = run["trainer"]["init"]
    init["model"].update(dropout_rate=0.0, attention_dropout_rate=0.0)
    init["loop"] = {"max_steps": 8, "eval_frequency": 0}
    init["logging"] = {"log_steps": 1}
    run["trainer"]["fit"]["train_dataloader"]["shuffle"] = True
    run["trainer"]["fit"].pop("val_dataloader")

    def fit(model_dir: str, steps: int, every: int) -> list[float]:
        init.update(model_dir=model_dir, checkpoint={"steps": every})
        init["loop"]["max_steps"] = steps
        Path("run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
        assert main(["fit", "run.yaml"]) == 0
        lines = (Path(model_dir) / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x)["loss"] for x in lines if json.loads(x).get("split") == "train"]

    whole = fit("whole", 8, 8)
    fit("parts", 4, 4)
    resumed = fit("parts", 8, 4)
    assert len(whole) == 8
    assert resumed[-4:] == whole[-4:]
