"""A model a checkpoint fills is built on ``meta`` and never initialised, with today's results.

Every entry point that loads a full checkpoint (fit from a Hugging Face folder, fit resuming a
plugtrain checkpoint, validate, generate, lm_eval, ``checkpoint convert``) gives bit-identical
weights and outputs with ``PLUGTRAIN_META_BUILD=0`` (the model built whole and initialised,
then loaded), and runs no initialiser over real tensors. What a checkpoint lacks (a
non-persistent buffer, a parameter left out of a non-strict load, LoRA adapters, everything
when nothing loads) gets the values a whole build gives it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

from support.hf_models import random_hf_model, save_hf

import plugtrain_models.model as model_module
from plugtrain.builtin.models import MLP
from plugtrain.cli import main as plugtrain_main
from plugtrain.config import load_plan
from plugtrain.config.plan import FitPlan, ValidatePlan
from plugtrain.conversion import hf_files, hf_to_plugtrain, open_checkpoint, read_checkpoint
from plugtrain.conversion import meta_build as deferred
from plugtrain.conversion.meta_build import filling
from plugtrain.discovery.loading import get_registry
from plugtrain.testing import write_run_file
from plugtrain.train.assembly import build_trainer
from plugtrain.train.assembly.run import _loads_weights
from plugtrain.train.checkpointing.state import trainer_state
from plugtrain_models.families import build_decoder
from plugtrain_models.generation import generate
from plugtrain_models.generation.loading import load_run

GPT2 = {
    "vocab_size": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 32, "n_inner": 48,
    "bos_token_id": 0, "eos_token_id": 1,
}  # fmt: skip
PROMPTS = [[5, 6, 7, 8], [3, 4]]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 (dropout 0.1, tied head) in bfloat16, saved in shards with an index."""
    model = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2)
    folder = tmp_path_factory.mktemp("hf") / "gpt2"
    return save_hf(model.to(torch.bfloat16), folder, max_shard_size="20KB")


@pytest.fixture(scope="module")
def model_keys(hf_folder: Path) -> dict[str, Any]:
    return {"name": "gpt2", **hf_to_plugtrain(hf_folder).model_keys}


@pytest.fixture
def initialised(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each Model Zoo initialisation that ran over real (not ``meta``) tensors."""
    calls: list[str] = []
    original = model_module.initialise

    def counting(model: torch.nn.Module) -> None:
        if not next(model.parameters()).is_meta:
            calls.append(type(model).__name__)
        original(model)

    monkeypatch.setattr(model_module, "initialise", counting)
    return calls


def _both_ways(monkeypatch: pytest.MonkeyPatch, run: Callable[[], Any]) -> tuple[Any, Any]:
    """``run()`` with the meta build, then with the model built whole (the old path)."""
    monkeypatch.setenv("PLUGTRAIN_META_BUILD", "1")
    new = run()
    monkeypatch.setenv("PLUGTRAIN_META_BUILD", "0")
    old = run()
    monkeypatch.delenv("PLUGTRAIN_META_BUILD")
    return new, old


def _assert_same_state(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different


def _build(model_keys: dict[str, Any], **changes: Any) -> Callable[[], torch.nn.Module]:
    keys = {k: v for k, v in {**model_keys, **changes}.items() if k != "name"}
    return lambda: build_decoder("gpt2", keys)


# -- the build itself ------------------------------------------------------------------------


def test_nothing_loaded_gives_the_initial_values_and_the_same_random_state_after(
    model_keys: dict[str, Any], initialised: list[str]
) -> None:
    build = _build(model_keys, position_embedding_type="fixed")
    torch.manual_seed(4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PLUGTRAIN_META_BUILD", "0")
        reference = deferred.build_for_loading(build)
        after_reference = torch.get_rng_state()
    assert initialised == ["LanguageModel"]  # the old path's build only
    torch.manual_seed(4)
    built = deferred.build_for_loading(build)
    assert torch.equal(torch.get_rng_state(), after_reference)
    assert deferred.is_pending(built)
    assert not deferred.is_pending(reference)
    tensors = {id(t) for t in (*built.parameters(), *built.buffers())}
    assert deferred.fill_pending(built) == len(tensors)  # the sine table among them
    _assert_same_state(built.state_dict(), reference.state_dict())
    (name, table), (_, expected) = (
        next(iter(built.named_buffers())),
        next(iter(reference.named_buffers())),
    )
    assert name.endswith("fixed_positions")
    assert torch.equal(table, expected)


def test_a_partial_load_gives_what_the_checkpoint_lacks_its_initial_values(
    model_keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    build = _build(model_keys, position_embedding_type="fixed")
    torch.manual_seed(100)
    checkpoint = build().state_dict()
    ends = ("ln_f.weight", "layers.1.ffn.ffn.0.linear_layer.weight")
    lacking = [n for n in checkpoint if n.endswith(ends)]
    part = {n: t for n, t in checkpoint.items() if n not in lacking}
    assert len(lacking) == 2

    def load() -> dict[str, torch.Tensor]:
        torch.manual_seed(5)
        model = deferred.build_for_loading(build)
        model.load_state_dict(part, strict=False)
        deferred.fill_pending(model, part)
        return model.state_dict()

    new, old = _both_ways(monkeypatch, load)
    _assert_same_state(new, old)
    assert not torch.equal(new[lacking[1]], checkpoint[lacking[1]])


def test_a_full_load_skips_every_initialiser_and_keeps_ties(
    model_keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch: list[int] = []
    original = filling._OnScratch.__init__

    def counting(self: Any, filled: set[int]) -> None:
        scratch.append(len(filled))
        original(self, filled)

    monkeypatch.setattr(filling._OnScratch, "__init__", counting)
    build = _build(model_keys, position_embedding_type="fixed")
    torch.manual_seed(100)
    checkpoint = build().state_dict()
    model = deferred.build_for_loading(build)
    model.load_state_dict(checkpoint)
    assert deferred.fill_pending(model, checkpoint) == 1  # the sine table alone
    assert scratch == []  # every fill of a loaded tensor skipped, none run on a copy
    _assert_same_state(model.state_dict(), checkpoint)
    inner = model.model
    assert inner.lm_head.weight is inner.embedding_layer.word_embeddings.weight


def test_a_tensor_under_two_names_becomes_one_model_tensor_only(
    model_keys: dict[str, Any],
) -> None:
    """As a DPO checkpoint names one decoder's tensors for its policy and its reference."""
    build = _build(model_keys)
    torch.manual_seed(100)
    checkpoint = {n: t.clone() for n, t in build().state_dict().items()}
    model = deferred.build_for_loading(build)
    inner = model.model
    first, second = "model.ln_f.bias", "model.transformer_decoder.layers.0.norm1.bias"
    checkpoint[second] = checkpoint[first]
    assert deferred.adopt(model, checkpoint) == len({id(p) for p in model.parameters()}) - 1
    assert inner.ln_f.bias.data_ptr() == checkpoint[first].data_ptr()
    assert inner.transformer_decoder.layers[0].norm1.bias.data_ptr() != checkpoint[first].data_ptr()


def test_a_model_without_init_weights_is_built_whole() -> None:
    model = deferred.build_for_loading(lambda: MLP(in_features=4, out_features=2, hidden=4))
    assert not deferred.is_pending(model)
    assert not any(p.is_meta for p in model.parameters())


def test_on_meta_draws_nothing_for_meta_tensors_and_as_usual_for_others() -> None:
    torch.manual_seed(3)
    expected = torch.empty(5).normal_(), torch.nn.init.normal_(torch.empty(5), std=2.0)
    torch.manual_seed(3)
    with deferred.on_meta():
        made = torch.empty(5)
        assert made.is_meta
        assert made.normal_() is made
        assert torch.nn.init.normal_(made, std=2.0) is made
        drawn = torch.empty(5, device="cpu").normal_()
        drawn_too = torch.nn.init.normal_(torch.empty(5, device="cpu"), std=2.0)
        assert made.uniform_().is_meta  # other calls keep torch's meta behaviour
    torch.testing.assert_close((drawn, drawn_too), expected, rtol=0, atol=0)


def test_a_folder_read_into_float32_as_it_loads_is_the_folder_converted_after(
    hf_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hf_files, "_PIECE", 7)  # many pieces, the last one short
    opened = open_checkpoint(hf_folder, get_registry())
    plain = read_checkpoint(opened).state
    assert {t.dtype for t in plain.values()} == {torch.bfloat16}
    wanted = dict.fromkeys(plain, torch.float32)
    read = read_checkpoint(opened, dtypes=wanted)
    _assert_same_state(read.state, {n: t.to(torch.float32) for n, t in plain.items()})
    assert {t.dtype for t in read.state.values()} == {torch.float32}
    storage_of = deferred.building.storage_of
    owned = {storage_of(read.state[n]) for n in read.owned}
    assert {storage_of(t) for t in read.state.values()} == owned  # the others are their ties
    assert not owned & {storage_of(t) for t in plain.values()}


def test_which_runs_load_weights() -> None:
    (plan,) = _plan_with(FitPlan(None, None, "ckpt", True), None)
    assert _loads_weights(plan, "fit")
    (plan,) = _plan_with(FitPlan(None, None, None, True), None)
    assert not _loads_weights(plan, "fit")
    (plan,) = _plan_with(FitPlan(None, None), ValidatePlan(None))
    assert not _loads_weights(plan, "fit")  # a fit from the model's own initial weights
    assert _loads_weights(plan, "validate")  # the newest checkpoint, or an error
    (plan,) = _plan_with(None, ValidatePlan(None, None, True))
    assert not _loads_weights(plan, "validate")
    assert not _loads_weights(plan, "validate_all")


def _plan_with(fit: FitPlan | None, validate: ValidatePlan | None) -> list[Any]:
    import attrs

    from plugtrain.config.plan import TrainerPlan

    fields = {f.name: None for f in attrs.fields(TrainerPlan) if f.default is attrs.NOTHING}
    return [attrs.evolve(TrainerPlan(**fields), fit=fit, validate=validate)]


# -- the entry points ------------------------------------------------------------------------


def _run_file(tmp_path: Path, model_keys: dict[str, Any], **init: Any) -> Path:
    section = {
        "backend": {"backend_type": "CPU"},
        "model_dir": str(tmp_path / "model_dir"),
        "seed": 1,
        "model": model_keys,
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 2},
        "checkpoint": {"steps": 2},
        **init,
    }
    return write_run_file(tmp_path, {"trainer": {"init": section}})


def _loader() -> torch.utils.data.DataLoader[Any]:
    tokens = torch.randint(0, 64, (8, 13), generator=torch.Generator().manual_seed(7))
    rows = [{"input_ids": t[:-1], "labels": t[1:]} for t in tokens]
    return torch.utils.data.DataLoader(rows, batch_size=2)


@pytest.mark.slow
def test_fit_from_a_folder_resume_and_validate_equal_the_initialised_build(
    tmp_path: Path,
    hf_folder: Path,
    model_keys: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    initialised: list[str],
) -> None:
    counts: list[int] = []

    def run() -> tuple[Any, ...]:
        folder = tmp_path / f"run{len(counts)}"
        plan, registry = load_plan(_run_file(folder, model_keys), [], model_only=True)
        (trainer_plan,) = plan.trainers
        initialised.clear()
        first = build_trainer(trainer_plan, registry, {}, weights_loaded=True)
        fitted = first.fit(_loader(), ckpt_path=str(hf_folder))  # dropout draws at each step
        checkpoint = first.checkpoint_path(2)
        longer = {"loop": {"max_steps": 4}}
        plan, registry = load_plan(_run_file(folder, model_keys, **longer), [], model_only=True)
        second = build_trainer(plan.trainers[0], registry, {}, weights_loaded=True)
        resumed = second.fit(_loader(), ckpt_path=str(checkpoint))
        third = build_trainer(plan.trainers[0], registry, {}, weights_loaded=True)
        validated = third.validate(_loader(), ckpt_path=str(checkpoint))
        counts.append(len(initialised))
        states = [t.unwrapped_model.state_dict() for t in (first, second, third)]
        return fitted, resumed, validated, states, torch.get_rng_state()

    new, old = _both_ways(monkeypatch, run)
    assert counts == [0, 3]  # no initialiser with the meta build; one per trainer without
    assert new[:3] == old[:3]
    for state, reference in zip(new[3], old[3], strict=True):
        _assert_same_state(state, reference)
    assert torch.equal(new[4], old[4])


@pytest.mark.slow
def test_an_adapter_only_checkpoint_of_the_model_as_built_resumes_as_before(
    tmp_path: Path, model_keys: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its base is the model's own initial weights: the meta build must hold them to load it."""
    lora = {"r": 2, "alpha": 4, "target_modules": ["Linear"]}
    callbacks = [{"Lora": {"lora_params": lora, "adapter_only_checkpoints": True}}]
    counts: list[int] = []

    def run() -> tuple[Any, ...]:
        folder = tmp_path / f"run{len(counts)}"
        counts.append(0)
        plan, registry = load_plan(
            _run_file(folder, model_keys, callbacks=callbacks), [], model_only=True
        )
        first = build_trainer(plan.trainers[0], registry, {})
        first.fit(_loader(), ckpt_path=None)  # the base: the model as built from the seed
        longer = {"loop": {"max_steps": 4}, "callbacks": callbacks}
        plan, registry = load_plan(_run_file(folder, model_keys, **longer), [], model_only=True)
        second = build_trainer(plan.trainers[0], registry, {}, weights_loaded=True)
        metrics = second.fit(_loader(), ckpt_path=str(first.checkpoint_path(2)))
        return metrics, second.unwrapped_model.state_dict()

    new, old = _both_ways(monkeypatch, run)
    assert new[0] == old[0]
    _assert_same_state(new[1], old[1])


def _load_run_file(tmp_path: Path, model_keys: dict[str, Any], lora: bool) -> Path:
    callbacks = [{"Lora": {"lora_params": {"r": 2, "alpha": 4, "target_modules": ["Linear"]}}}]
    return _run_file(tmp_path, model_keys, **({"callbacks": callbacks} if lora else {}))


@pytest.mark.parametrize("lora", [False, True], ids=["base", "lora"])
def test_generate_loads_the_folder_into_an_uninitialised_model(
    tmp_path: Path,
    hf_folder: Path,
    model_keys: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    initialised: list[str],
    lora: bool,
) -> None:
    run_file = _load_run_file(tmp_path, model_keys, lora)
    adopted: list[int] = []

    def counting(model: torch.nn.Module, weights: Any) -> int:
        adopted.append(deferred.adopt(model, weights))
        return adopted[-1]

    monkeypatch.setattr(trainer_state, "adopt", counting)

    def run() -> tuple[Any, ...]:
        initialised.clear()
        loaded = load_run(str(run_file), [], str(hf_folder))
        model = loaded.model.eval()
        ids = generate(model, PROMPTS, 4)
        return model.state_dict(), ids, len(initialised)

    (state, ids, calls), (old_state, old_ids, old_calls) = _both_ways(monkeypatch, run)
    _assert_same_state(state, old_state)
    assert ids == old_ids
    assert (calls, old_calls) == (0, 1)
    assert any("lora_A" in name for name in state) == lora
    base = {t.untyped_storage().data_ptr() for n, t in state.items() if "lora_" not in n}
    assert adopted == [len(base), 0]  # the converted tensors became the model's; none when whole


def test_lm_eval_scores_the_same_model(
    tmp_path: Path,
    hf_folder: Path,
    model_keys: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    initialised: list[str],
) -> None:
    from plugtrain_models.evaluation.harness import EleutherEvalHarness

    scores: list[tuple[torch.Tensor, int]] = []

    def score(harness: Any, trainer: Any) -> dict[str, float]:
        ids = torch.tensor([PROMPTS[0]])
        scores.append((trainer.unwrapped_model.eval().logits(ids), len(initialised)))
        return {}

    monkeypatch.setattr(EleutherEvalHarness, "run", score)
    harness = {"EleutherEvalHarness": {"eeh_args": {"tasks": "x"}, "batch_size": 1}}
    run_file = _run_file(tmp_path, model_keys, callbacks=[harness])
    args = ["lm_eval", str(run_file), "--ckpt", str(hf_folder), "--tokenizer", "bytes"]

    def run() -> int:
        initialised.clear()
        return plugtrain_main(args)

    assert _both_ways(monkeypatch, run) == (0, 0)
    (new, new_calls), (old, old_calls) = scores
    assert torch.equal(new, old)
    assert (new_calls, old_calls) == (0, 1)


def test_checkpoint_convert_runs_no_initialiser(
    tmp_path: Path, hf_folder: Path, initialised: list[str]
) -> None:
    """Both directions read and write tensors alone: no model is built with real storage."""
    to_plugtrain = [
        "checkpoint", "convert", str(hf_folder), "--src-fmt", "hf", "--tgt-fmt", "plugtrain",
        "--config", str(hf_folder / "config.json"), "--output-dir", str(tmp_path),
    ]  # fmt: skip
    assert plugtrain_main(to_plugtrain) == 0
    converted, config = tmp_path / "model_to_plugtrain.mdl", tmp_path / "config_to_plugtrain.yaml"
    back = tmp_path / "back"
    to_hf = [
        "checkpoint", "convert", str(converted), "--src-fmt", "plugtrain", "--tgt-fmt", "hf",
        "--config", str(config), "--output-dir", str(back),
    ]  # fmt: skip
    assert plugtrain_main(to_hf) == 0
    assert initialised == []
    _assert_same_state(
        hf_to_plugtrain(next(back.iterdir())).state, hf_to_plugtrain(hf_folder).state
    )
