"""``EleutherEvalHarness`` and ``plugtrain lm_eval``: plugtrain's model under lm-eval.

The oracle is lm-eval's own ``hf`` model on the same Hugging Face folder (a tiny random Llama
with the tiny byte-level BPE tokenizer of ``data/tiny_tokenizer``, which adds BOS by default:
lm-eval 0.4.13's ``hf`` model then adds BOS, and so does plugtrain's, see ``evaluation/lm.py``).
The tasks are local (``data/lm_eval_tasks``): 10 multiple-choice questions, 5 greedy
completions and 3 perplexity texts. Same ``acc``/``exact_match``/perplexities, and every
log-likelihood within float32 round-off: sums of a dozen float32 log-probabilities around -20
agree to about 1e-5 (atol 1e-4 below).
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from plugtrain.cli import main
from plugtrain.conversion import hf_to_plugtrain
from plugtrain.errors import ConfigError
from plugtrain.testing import trainer_run, write_run_file
from plugtrain.train.trainer import Trainer
from plugtrain_models.evaluation.harness import EleutherEvalHarness, flat_metrics
from plugtrain_models.families import build_decoder

lm_eval = pytest.importorskip("lm_eval")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

DATA = Path(__file__).parent / "data"
TASKS = DATA / "lm_eval_tasks"
MC, GEN = TASKS / "capitals_mc.yaml", TASKS / "completion_gen.yaml"
LLAMA = {
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
}
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (weights N(0, 0.1), norms + 1) with its tokenizer, saved."""
    folder = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.1)
            if name.endswith("weight") and parameter.ndim == 1:
                parameter.add_(1.0)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DATA / "tiny_tokenizer" / name, folder)
    return folder


@pytest.fixture(scope="module")
def ours(hf_folder: Path) -> torch.nn.Module:
    converted = hf_to_plugtrain(hf_folder)
    model = build_decoder(converted.model_name, converted.model_keys)
    model.load_state_dict(converted.state)
    return model


def _harness(hf_folder: Path, tasks: Any, **keys: Any) -> EleutherEvalHarness:
    eeh_args = {"tasks": tasks, "log_samples": True, **keys.pop("eeh_args", {})}
    return EleutherEvalHarness(
        eeh_args=eeh_args, batch_size=4, data_dir="unused",
        pretrained_model_name_or_path=str(hf_folder), **keys,
    )  # fmt: skip


def _responses(results: dict[str, Any], task: str) -> list[Any]:
    return [sample["resps"] for sample in results["samples"][task]]


@pytest.mark.slow
def test_the_harness_equals_lm_evals_own_hf_model(hf_folder: Path, ours: torch.nn.Module) -> None:
    from lm_eval.evaluator import simple_evaluate

    from plugtrain_models.evaluation.tasks import resolve_tasks

    harness = _harness(hf_folder, str(TASKS))
    mine = harness.evaluate(ours, step=0, output_dir=None)
    specs, manager = resolve_tasks(str(TASKS))
    reference = simple_evaluate(
        model="hf", model_args={"pretrained": str(hf_folder), "dtype": "float32"},
        tasks=specs, task_manager=manager, batch_size=4, log_samples=True, device="cpu",
    )  # fmt: skip
    theirs = flat_metrics(reference["results"])
    assert set(mine) == set(theirs)
    for name in ("plugtrain_capitals_mc/acc", "plugtrain_capitals_mc/acc_norm",
                 "plugtrain_completion_gen/exact_match"):  # fmt: skip
        assert mine[name] == theirs[name], name
    for name in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
        key = f"plugtrain_sentences_rolling/{name}"
        assert mine[key] == pytest.approx(theirs[key], rel=1e-5), key
    ours_mc = _responses(harness.last_results or {}, "plugtrain_capitals_mc")
    theirs_mc = _responses(reference, "plugtrain_capitals_mc")
    for mine_choices, their_choices in zip(ours_mc, theirs_mc, strict=True):
        for ((mine_ll, mine_greedy),), ((their_ll, their_greedy),) in zip(
            mine_choices, their_choices, strict=True
        ):
            assert mine_ll == pytest.approx(their_ll, abs=1e-4)
            assert mine_greedy == their_greedy
    generated = _responses(harness.last_results or {}, "plugtrain_completion_gen")
    assert generated == _responses(reference, "plugtrain_completion_gen")
    assert any(text[0] for text in generated)  # the model wrote something: a real comparison


def test_a_hub_task_is_an_error_naming_the_dataset(hf_folder: Path, ours: torch.nn.Module) -> None:
    harness = _harness(hf_folder, "winogrande")
    with pytest.raises(ConfigError, match="'allenai/winogrande' \\(subset 'winogrande_xl'\\)"):
        harness.evaluate(ours, step=0, output_dir=None)


def test_an_unknown_task_is_an_error(hf_folder: Path, ours: torch.nn.Module) -> None:
    harness = _harness(hf_folder, "no_such_task_here", eeh_args={"include_path": str(TASKS)})
    with pytest.raises(ConfigError, match="no lm-eval task, group or tag is named"):
        harness.evaluate(ours, step=0, output_dir=None)


def test_a_hub_tokenizer_name_is_an_error_saying_what_to_save(ours: torch.nn.Module) -> None:
    harness = EleutherEvalHarness(
        eeh_args={"tasks": str(MC)}, batch_size=1, data_dir="x",
        pretrained_model_name_or_path="meta-llama/Meta-Llama-3-8B-Instruct",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="not a local tokenizer folder"):
        harness.evaluate(ours, step=0, output_dir=None)


class _Recorder:
    """A logger keeping every record."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, dict[str, float]]] = []

    def log_metrics(self, step: int, split: str, metrics: Any) -> None:
        self.records.append((step, split, dict(metrics)))

    def close(self) -> None:
        pass


def _batches(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    ids = [torch.randint(3, 320, (2, 12), generator=generator) for _ in range(count)]
    return [{"input_ids": i, "labels": i, "attention_mask": torch.ones_like(i)} for i in ids]


def test_during_fit_every_n_vals_and_after_the_last_step(
    hf_folder: Path, ours: torch.nn.Module, tmp_path: Path
) -> None:
    harness = _harness(hf_folder, str(MC), every_n_vals=2,
                       eeh_args={"output_path": "eeh", "limit": 4})  # fmt: skip
    recorder = _Recorder()
    trainer = Trainer(
        device="CPU", model=copy.deepcopy(ours), model_dir=tmp_path,
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.0),
        loop={"max_steps": 5, "eval_frequency": 2}, checkpoint={"steps": 100},
        callbacks=[harness], loggers=[recorder],
    )  # fmt: skip
    trainer.fit(_batches(5), _batches(1))
    runs = sorted(
        {step for step, _, metrics in recorder.records if "plugtrain_capitals_mc/acc" in metrics}
    )
    # evaluations at steps 2 and 4 (and maybe 5); every second one runs lm-eval, then the end
    assert runs == [4, 5]
    assert sorted(p.name for p in (tmp_path / "eeh").iterdir()) == [
        "results_4.json", "results_5.json", "samples_plugtrain_capitals_mc_4.jsonl",
        "samples_plugtrain_capitals_mc_5.jsonl",
    ]  # fmt: skip
    written = json.loads((tmp_path / "eeh" / "results_5.json").read_text())
    assert (
        written["results"]["plugtrain_capitals_mc"]["acc,none"]
        == harness.last_results["results"]["plugtrain_capitals_mc"]["acc,none"]
    )  # type: ignore[index]


def test_validate_all_runs_it_once_per_checkpoint(
    hf_folder: Path, ours: torch.nn.Module, tmp_path: Path
) -> None:
    model = copy.deepcopy(ours)  # trained here: the module's fixture stays as read

    def trainer(callbacks: list[Any], loggers: list[Any]) -> Trainer:
        return Trainer(
            device="CPU", model=model, model_dir=tmp_path, callbacks=callbacks, loggers=loggers,
            optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=1e-3),
            loop={"max_steps": 2}, checkpoint={"steps": 1},
        )  # fmt: skip

    trainer([], []).fit(_batches(2))
    recorder = _Recorder()
    harness = _harness(hf_folder, str(MC), eeh_args={"limit": 2})
    records = trainer([harness], [recorder]).validate_all({"a": _batches(1), "b": _batches(1)})
    assert [(r["step"], r["dataloader"]) for r in records] == [
        (1, "a"),
        (1, "b"),
        (2, "a"),
        (2, "b"),
    ]
    with_eeh = [
        (step, split) for step, split, m in recorder.records if "plugtrain_capitals_mc/acc" in m
    ]
    assert with_eeh == [(1, "validate_all/a"), (2, "validate_all/a")]


def _run_file(tmp_path: Path, hf_folder: Path, callback: dict[str, Any]) -> Path:
    converted = hf_to_plugtrain(hf_folder)
    init = {
        "backend": {"backend_type": "CPU"},
        "model_dir": str(tmp_path / "model_dir"),
        "model": {"name": converted.model_name, **converted.model_keys},
        "callbacks": [{"EleutherEvalHarness": callback}],
    }
    validate_all = {"val_dataloaders": [], "ckpt_paths": None}
    return write_run_file(tmp_path, trainer_run(init, validate_all=validate_all))


def test_the_lm_eval_command_writes_lm_evals_results_json(
    hf_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    callback = {"eeh_args": {"tasks": "winogrande"}, "batch_size": 2, "data_dir": "eeh"}
    run_file = _run_file(tmp_path, hf_folder, callback)
    output = tmp_path / "results"
    command = ["lm_eval", str(run_file), "--ckpt", str(hf_folder), "--tasks", f"{MC},{GEN}",
               "--output-path", str(output)]  # fmt: skip
    assert main(command) == 0
    printed = dict(line.rsplit(" ", 1) for line in capsys.readouterr().out.splitlines())
    written = json.loads((output / "results_0.json").read_text())
    assert float(printed["plugtrain_capitals_mc/acc"]) == pytest.approx(
        written["results"]["plugtrain_capitals_mc"]["acc,none"], abs=1e-6
    )
    assert "plugtrain_completion_gen/exact_match" in printed


@pytest.mark.parametrize("tutorial", ["finetuning", "pretraining"])
def test_model_zoos_eeh_files_check_as_written(
    tutorial: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / "modelzoo_eeh" / f"{tutorial}_eeh_config.yaml"
    assert main(["check", str(path)]) == 0
    assert "OK (1 trainer)" in capsys.readouterr().out


SHRINK = {  # the tutorial's Llama-3-8B shape made tiny, to fit the Hugging Face folder above
    "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4, "filter_size": 96,
    "vocab_size": 320, "max_position_embeddings": 128, "rotary_dim": 16,
    "extra_attention_params.num_kv_groups": 2,
}  # fmt: skip


def test_model_zoos_eeh_file_runs_through_lm_eval_with_a_local_task(
    hf_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / "modelzoo_eeh" / "finetuning_eeh_config.yaml"
    overrides = [f"trainer.init.model.{key}={value}" for key, value in SHRINK.items()]
    sets = [word for item in overrides for word in ("--set", item)]
    command = ["lm_eval", str(path), *sets, "--ckpt", str(hf_folder), "--tasks", str(MC),
               "--set", f"trainer.init.model_dir={tmp_path}"]  # fmt: skip
    assert main(command) == 0
    assert "plugtrain_capitals_mc/acc " in capsys.readouterr().out


def test_without_a_local_task_the_eeh_file_says_what_to_download(
    hf_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = DATA / "modelzoo_eeh" / "finetuning_eeh_config.yaml"
    overrides = [f"trainer.init.model.{key}={value}" for key, value in SHRINK.items()]
    sets = [word for item in overrides for word in ("--set", item)]
    assert main(["lm_eval", str(path), *sets, "--ckpt", str(hf_folder)]) == 2
    assert "'allenai/winogrande'" in capsys.readouterr().err


def test_bigcode_eval_harness_check_names_the_package(
    tmp_path: Path, hf_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_file = _run_file(tmp_path, hf_folder, {"eeh_args": {"tasks": str(MC)},
                                                "batch_size": 1, "data_dir": "x"})  # fmt: skip
    data = yaml.safe_load(run_file.read_text())
    data["trainer"]["init"]["callbacks"] = [
        {"BigCodeEvalHarness": {"bigcode_args": {"tasks": "humaneval"}, "batch_size": 1,
                                "data_dir": "x"}}
    ]  # fmt: skip
    run_file.write_text(yaml.safe_dump(data))
    assert main(["check", str(run_file)]) == 2
    assert "bigcode-evaluation-harness" in capsys.readouterr().err


def test_check_names_the_eval_extra_when_lm_eval_is_missing_mocked(
    tmp_path: Path, hf_folder: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """lm-eval is installed here, so its absence is simulated (the module lookup says no)."""
    from plugtrain_models.evaluation import schemas

    callback = {"eeh_args": {"tasks": str(MC)}, "batch_size": 1, "data_dir": "x"}
    run_file = _run_file(tmp_path, hf_folder, callback)
    monkeypatch.setattr(schemas, "_installed", lambda module: module != "lm_eval")
    assert main(["check", str(run_file)]) == 2
    assert "pip install 'plugtrain-models[eval]'" in capsys.readouterr().err
