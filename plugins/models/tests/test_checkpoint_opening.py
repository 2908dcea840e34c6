"""Every caller opens a Hugging Face checkpoint through ``plugtrain.conversion.open_checkpoint``.

fit, validate, ``check``, ``checkpoint convert``, ``generate``, ``lm_eval`` and the lm-eval
harness callback. A ``config.json`` that describes another model is refused before any shard
is read: the refusal comes even when the shard is not a weights file at all.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

from support.hf_models import random_hf_model, save_hf

import plugtrain.conversion
from plugtrain.cli import main
from plugtrain.conversion import (
    ConversionError,
    ForeignCheckpoint,
    open_checkpoint,
    read_checkpoint,
)
from plugtrain.errors import CheckpointError, CheckpointMismatchError, UnknownNameError
from plugtrain.registry import Registry
from plugtrain.train.trainer import Trainer
from plugtrain_models.families import build_decoder

TOKENIZER = Path(__file__).parent / "data" / "tiny_tokenizer"
LLAMA = {
    "vocab_size": 320,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 32,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
REFUSAL = "rope_theta: config.json has 500000.0, the model 10000.0"
"""The one refusal text: the key and both values (config.json's, then the model's)."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved as a Hugging Face folder, with the tiny tokenizer."""
    model = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    saved = save_hf(model, tmp_path_factory.mktemp("hf") / "llama")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, saved)
    return saved


@pytest.fixture(scope="module")
def keys(folder: Path) -> dict[str, Any]:
    """The ``model:`` keys the folder's ``config.json`` describes."""
    from plugtrain.discovery.loading import get_registry

    return dict(open_checkpoint(folder, get_registry()).model_keys)


@pytest.fixture(scope="module")
def unreadable(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same ``config.json`` beside a shard that is not a safetensors file."""
    copy = tmp_path_factory.mktemp("hf") / "unreadable"
    shutil.copytree(folder, copy)
    (copy / "model.safetensors").write_bytes(b"not a safetensors file")
    return copy


class _Spy:
    """Records each call of ``open_checkpoint`` and each ``ForeignCheckpoint.read``."""

    def __init__(self) -> None:
        self.opened: list[dict[str, Any]] = []
        self.reads = 0


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    recorded = _Spy()
    real_open, real_read = open_checkpoint, read_checkpoint

    def opening(source: Any, registry: Registry, **options: Any) -> ForeignCheckpoint:
        recorded.opened.append({"source": Path(source), "registry": registry, **options})
        return real_open(source, registry, **options)

    def reading(opened: ForeignCheckpoint, **options: Any) -> Any:
        recorded.reads += 1
        return real_read(opened, **options)

    monkeypatch.setattr(plugtrain.conversion, "open_checkpoint", opening)
    monkeypatch.setattr(plugtrain.conversion, "read_checkpoint", reading)
    return recorded


def _trainer(keys: dict[str, Any], tmp_path: Path, **options: Any) -> Trainer:
    return Trainer(device="CPU", model_dir=tmp_path / "model", model=build_decoder("llama", keys),
                   **options)  # fmt: skip


def _batches() -> list[dict[str, torch.Tensor]]:
    tokens = torch.randint(3, 320, (2, 9), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": tokens, "labels": tokens, "attention_mask": torch.ones_like(tokens)}]


def _run_file(tmp_path: Path, keys: dict[str, Any], ckpt: Path | None = None, **more: Any) -> Path:
    init = {"backend": {"backend_type": "CPU"}, "model_dir": str(tmp_path / "model_dir"),
            "seed": 1, "model": {"name": "llama", **keys}, **more}  # fmt: skip
    validate_all = {"val_dataloaders": [], "ckpt_paths": None if ckpt is None else [str(ckpt)]}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"init": init, "validate_all": validate_all}}))
    return path


# -- fit and validate ----------------------------------------------------------------------------


def test_fit_opens_through_open_checkpoint_with_the_models_converter_and_keys(
    folder: Path, keys: dict[str, Any], tmp_path: Path, spy: _Spy
) -> None:
    trainer = _trainer(keys, tmp_path, optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.0),
                       loop={"max_steps": 1})  # fmt: skip
    trainer.fit(_batches(), ckpt_path=str(folder))
    (call,) = spy.opened
    assert call["source"] == folder
    assert call["converter"] == "llama"
    assert call["model_keys"]["rope_theta"] == 500000.0
    assert spy.reads == 1
    assert trainer.global_step == 1


def test_validate_opens_through_open_checkpoint(
    folder: Path, keys: dict[str, Any], tmp_path: Path, spy: _Spy
) -> None:
    trainer = _trainer(keys, tmp_path)
    trainer.validate(_batches(), ckpt_path=str(folder))
    assert [c["source"] for c in spy.opened] == [folder]
    assert spy.reads == 1


@pytest.mark.parametrize("method", ["fit", "validate"])
def test_fit_and_validate_refuse_another_config_before_reading_a_shard(
    unreadable: Path, keys: dict[str, Any], tmp_path: Path, spy: _Spy, method: str
) -> None:
    sgd = lambda model: torch.optim.SGD(model.parameters(), lr=0.0)  # noqa: E731
    trainer = _trainer({**keys, "rope_theta": 10000.0}, tmp_path, optimizer=sgd)
    if method == "fit":
        with pytest.raises(CheckpointMismatchError, match=REFUSAL):
            trainer.fit(_batches(), ckpt_path=str(unreadable))
    else:
        with pytest.raises(CheckpointMismatchError, match=REFUSAL):
            trainer.validate([], ckpt_path=str(unreadable))
    assert len(spy.opened) == 1
    assert spy.reads == 0


def test_a_run_files_trainer_opens_with_the_runs_registry_and_refuses_another_config(
    unreadable: Path,
    keys: dict[str, Any],
    tmp_path: Path,
    spy: _Spy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_file = _run_file(tmp_path, {**keys, "rope_theta": 10000.0}, unreadable)
    assert main(["validate_all", str(run_file)]) == 2  # a usage error, as check says it
    assert REFUSAL in capsys.readouterr().err
    (call,) = spy.opened
    assert call["converter"] == "llama"
    assert "llama" in call["registry"].names("checkpoint_converter")
    assert spy.reads == 0


def test_the_trainer_looks_the_converter_up_in_its_own_registry(
    folder: Path, keys: dict[str, Any], tmp_path: Path
) -> None:
    trainer = _trainer(keys, tmp_path, registry=Registry())  # holds no converter
    with pytest.raises(UnknownNameError, match="llama"):
        trainer.validate(_batches(), ckpt_path=str(folder))


def test_a_model_naming_no_converter_is_read_by_the_one_of_its_registered_name(
    folder: Path, keys: dict[str, Any], tmp_path: Path, spy: _Spy
) -> None:
    from plugtrain_models.model import DecoderLM

    class Unnamed(DecoderLM):
        checkpoint_converter = None  # type: ignore[assignment]

    def unnamed() -> Unnamed:
        model = build_decoder("llama", keys)
        model.__class__ = Unnamed
        return model

    bare = Trainer(device="CPU", model_dir=tmp_path / "bare", model=unnamed())
    with pytest.raises(CheckpointError, match="names no checkpoint converter"):
        bare.validate(_batches(), ckpt_path=str(folder))
    assert spy.opened == []
    named = Trainer(
        device="CPU",
        model_dir=tmp_path / "named",
        model=unnamed(),
        config={"model": {"name": "llama", **keys}},
    )  # as a run file gives it
    named.validate(_batches(), ckpt_path=str(folder))
    assert [c["converter"] for c in spy.opened] == ["llama"]


def test_open_checkpoint_has_no_fallback_registry(folder: Path) -> None:
    with pytest.raises(UnknownNameError):
        open_checkpoint(folder, Registry(), converter="llama")


def test_a_shard_is_read_only_by_read_checkpoint(unreadable: Path, keys: dict[str, Any]) -> None:
    from plugtrain.discovery.loading import get_registry

    opened = open_checkpoint(unreadable, get_registry(), converter="llama", model_keys=keys)
    assert opened.weight_files == (unreadable / "model.safetensors",)
    with pytest.raises(ConversionError, match="not a readable safetensors file"):
        read_checkpoint(opened)


# -- check -----------------------------------------------------------------------------------------


def test_check_opens_through_open_checkpoint_as_a_dry_run(
    unreadable: Path, keys: dict[str, Any], tmp_path: Path, spy: _Spy
) -> None:
    assert main(["check", str(_run_file(tmp_path, keys, unreadable))]) == 0
    (call,) = spy.opened
    assert call["source"] == unreadable
    assert call["converter"] == "llama"
    assert spy.reads == 0  # the unreadable shard was never opened


def test_check_refuses_another_config_naming_the_key_and_both_values(
    unreadable: Path,
    keys: dict[str, Any],
    tmp_path: Path,
    spy: _Spy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_file = _run_file(tmp_path, {**keys, "rope_theta": 10000.0}, unreadable)
    assert main(["check", str(run_file)]) == 2
    assert REFUSAL in capsys.readouterr().err
    assert len(spy.opened) == 1
    assert spy.reads == 0


# -- checkpoint convert ----------------------------------------------------------------------------


def _convert(source: Path, output: Path, model: str = "llama") -> list[str]:
    return ["checkpoint", "convert", str(source), "--model", model, "--src-fmt", "hf",
            "--tgt-fmt", "plugtrain", "--config", str(source / "config.json"),
            "--output-dir", str(output)]  # fmt: skip


def test_checkpoint_convert_opens_through_open_checkpoint(
    folder: Path, tmp_path: Path, spy: _Spy
) -> None:
    assert main(_convert(folder, tmp_path / "out")) == 0
    (call,) = spy.opened
    assert call["source"] == folder / "model.safetensors"
    assert call["converter"] == "llama"
    assert spy.reads == 1
    assert (tmp_path / "out" / "model_to_plugtrain.mdl").is_file()


def test_checkpoint_convert_refuses_another_architecture_before_reading_a_shard(
    unreadable: Path, tmp_path: Path, spy: _Spy, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_convert(unreadable, tmp_path / "out", model="gpt2")) == 1
    assert "model_type is 'llama', but the 'gpt2' converter reads" in capsys.readouterr().err
    assert len(spy.opened) == 1
    assert spy.reads == 0


# -- generate and lm_eval --------------------------------------------------------------------------


def test_generate_opens_through_open_checkpoint_with_the_run_files_registry(
    folder: Path,
    keys: dict[str, Any],
    tmp_path: Path,
    spy: _Spy,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = ["generate", str(_run_file(tmp_path, keys)), "--ckpt", str(folder), "--prompt",
               "Paris is", "--max-tokens", "2", "--json"]  # fmt: skip
    assert main(command) == 0
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) <= 2
    (call,) = spy.opened
    assert call["converter"] == "llama"
    assert call["model_keys"]["rope_theta"] == 500000.0
    assert "llama" in call["registry"].names("checkpoint_converter")
    assert spy.reads == 1


@pytest.mark.parametrize("command", ["generate", "lm_eval"])
def test_generate_and_lm_eval_refuse_another_config_before_reading_a_shard(
    unreadable: Path,
    keys: dict[str, Any],
    tmp_path: Path,
    spy: _Spy,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    if command == "lm_eval":
        pytest.importorskip("lm_eval")
    harness = {"eeh_args": {"tasks": "winogrande"}, "batch_size": 2, "data_dir": "eeh"}
    run_file = _run_file(tmp_path, {**keys, "rope_theta": 10000.0},
                         callbacks=[{"EleutherEvalHarness": harness}])  # fmt: skip
    arguments = ["--prompt", "Paris"] if command == "generate" else ["--tasks", "winogrande"]
    assert main([command, str(run_file), "--ckpt", str(unreadable), *arguments]) == 2
    assert REFUSAL in capsys.readouterr().err
    assert len(spy.opened) == 1
    assert spy.reads == 0


# -- the lm-eval harness callback ------------------------------------------------------------------


def test_the_harness_callback_evaluates_a_checkpoint_opened_through_open_checkpoint(
    folder: Path,
    unreadable: Path,
    keys: dict[str, Any],
    tmp_path: Path,
    spy: _Spy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("lm_eval")
    from plugtrain_models.evaluation.harness import EleutherEvalHarness

    evaluated: list[float] = []

    def evaluate(self: Any, model: Any, step: int, output_dir: Any) -> dict[str, float]:
        evaluated.append(float(model.model.embedding_layer.word_embeddings.weight.detach().sum()))
        return {}  # lm-eval itself is test_lm_eval.py's

    monkeypatch.setattr(EleutherEvalHarness, "evaluate", evaluate)
    harness = EleutherEvalHarness(eeh_args={"tasks": "winogrande"}, batch_size=2, data_dir="x")
    _trainer(keys, tmp_path, callbacks=[harness]).validate(_batches(), ckpt_path=str(folder))
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder)
    expected = float(hf.model.embed_tokens.weight.detach().sum())
    assert evaluated == [pytest.approx(expected, abs=1e-3)]
    mismatched = _trainer({**keys, "rope_theta": 10000.0}, tmp_path, callbacks=[harness])
    with pytest.raises(CheckpointMismatchError, match=REFUSAL):
        mismatched.validate(_batches(), ckpt_path=str(unreadable))
    assert len(evaluated) == 1
    assert [c["source"] for c in spy.opened] == [folder, unreadable]
    assert spy.reads == 1
