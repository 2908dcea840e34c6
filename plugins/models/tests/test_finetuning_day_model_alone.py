"""Generation and evaluation from a model alone: a run file without work sections or data,
``validate_all`` with callbacks only, lm_eval's tokenizer fallback and its ``--output-path``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval")

import plugtrain
from plugtrain.builtin.models import MLP
from plugtrain.cli import main as plugtrain_main
from plugtrain.config import load_plan
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.evaluation.harness import EleutherEvalHarness
from plugtrain_models.evaluation.run import _apply_flags, _tokenizer_dir
from plugtrain_models.generation.loading import load_run

MODEL = {
    "name": "llama",
    "vocab_size": 300,
    "hidden_size": 32,
    "filter_size": 48,
    "num_hidden_layers": 1,
    "num_heads": 4,
    "max_position_embeddings": 64,
}


def _init(model_dir: Path) -> dict[str, Any]:
    return {"model_dir": str(model_dir), "backend": {"backend_type": "CPU"}, "model": MODEL}


def test_generate_from_a_run_file_with_only_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run_file(tmp_path, {"trainer": {"init": _init(tmp_path / "m")}})
    status = plugtrain_main([
        "generate", str(run), "--prompt", "ab", "--max-tokens", "3", "--tokenizer", "bytes",
        "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.err
    (line,) = captured.out.splitlines()
    assert len(json.loads(line)["token_ids"]) == 3


def test_a_validate_section_whose_data_is_elsewhere_does_not_stop_generation(
    tmp_path: Path,
) -> None:
    data = {"GptHDF5MapDataProcessor": {"data_dir": str(tmp_path / "absent"), "batch_size": 2}}
    run = write_run_file(
        tmp_path, trainer_run(_init(tmp_path / "m"), validate={"val_dataloader": data})
    )
    with pytest.raises(plugtrain.errors.ConfigError, match="does not exist"):
        load_plan(run, import_local=True)  # fit and validate still need their data
    loaded = load_run(str(run), [], None)
    assert loaded.model.settings.vocab_size == 300


def test_validate_all_without_data_runs_the_callbacks_alone(tmp_path: Path) -> None:
    class Downstream:
        """Adds a metric at each evaluation, as a downstream harness does."""

        def on_validate_end(self, trainer: Any, metrics: dict[str, float]) -> None:
            metrics["downstream/score"] = float(trainer.global_step) + 0.5

    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "m",
        model=lambda: MLP(in_features=4, out_features=2, hidden=4),
        callbacks=[Downstream()],
    )
    records = trainer.validate_all(ckpt_paths=None)
    assert records == [{"checkpoint": None, "step": 0, "dataloader": None, "downstream/score": 0.5}]
    run = write_run_file(
        tmp_path,
        trainer_run(_init(tmp_path / "m"), validate_all={"ckpt_paths": None}),
        name="all.yaml",
    )
    (plan,) = load_plan(run)[0].trainers
    assert plan.validate_all is not None
    assert plan.validate_all.val_dataloaders == ()


def _args(**given: Any) -> argparse.Namespace:
    flags = ("tasks", "num_fewshot", "limit", "output_path", "include_path", "max_tokens")
    names = (*flags, "temperature", "top_k", "top_p", "batch_size", "tokenizer")
    return argparse.Namespace(**{name: given.get(name) for name in names})


def test_lm_eval_writes_its_output_path_where_the_user_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    harness = EleutherEvalHarness(eeh_args={"tasks": "x"}, batch_size=1)  # no data_dir needed
    _apply_flags(harness, _args(output_path="results"))
    assert harness.output_dir(tmp_path / "model_dir") == tmp_path / "results"


def test_lm_eval_falls_back_to_the_tokenizer_of_the_runs_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    params = {"processing": {"tokenizer": "bytes", "eos_id": 256}}
    (data / "data_params.json").write_text(json.dumps(params))
    loader = {"GptHDF5MapDataProcessor": {"data_dir": str(data), "batch_size": 2}}
    run = write_run_file(
        tmp_path, trainer_run(_init(tmp_path / "m"), validate={"val_dataloader": loader})
    )
    loaded = load_run(str(run), [], None)
    harness = EleutherEvalHarness(eeh_args={"tasks": "x"}, batch_size=1)
    _tokenizer_dir(harness, _args(), loaded)
    tokenizer = harness.tokenizer()
    assert tokenizer.decode(tokenizer.encode("hé")) == "hé"
