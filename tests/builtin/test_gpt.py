"""plugtrain-models' GPT on the built-in StdlibText data, and examples/gpt.yaml through the CLI.

``GPT`` is a configuration of plugtrain-models' decoder (the core ships no transformer), so
these tests skip when plugtrain-models is not installed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from support.paths import REPO

from plugtrain.bases.param_groups import name_matches
from plugtrain.builtin.text import stdlib_text_loader
from plugtrain.train.trainer import Trainer

GPT = pytest.importorskip("plugtrain_models.gpt", reason="plugtrain-models is not installed").GPT

ROOT = REPO
EXAMPLE = ROOT / "examples" / "gpt.yaml"

LAYERS = "model.transformer_decoder.layers"
"""The prefix of the decoder layers' parameter names (Model Zoo's)."""
MODEL_ZOO_GLOBS = (
    "*proj_[qkv]_dense_layer.weight",
    "*proj_output_dense_layer.weight",
    "*linear_layer.weight",
)


def _names(model: torch.nn.Module, pattern: str) -> list[str]:
    return [name for name, _ in model.named_parameters() if name_matches(pattern, name)]


def test_gpt_names_its_layers_as_model_zoo_does():
    model = GPT(n_layer=2, n_head=2, n_embd=16, block_size=8)
    assert len(_names(model, MODEL_ZOO_GLOBS[0])) == 6
    assert _names(model, MODEL_ZOO_GLOBS[1]) == [
        f"{LAYERS}.{i}.self_attn.proj_output_dense_layer.weight" for i in range(2)
    ]
    assert _names(model, MODEL_ZOO_GLOBS[2]) == [
        f"{LAYERS}.{i}.ffn.ffn.{j}.linear_layer.weight" for i in range(2) for j in range(2)
    ]
    names = [name for name, _ in model.named_parameters()]
    # What cstorch's default sparsity filter skips: embeddings, norms, the head.
    skipped = [n for n in names if any(w in n for w in ("embedding", "norm", "ln_f", "lm_head"))]
    matched = {n for g in MODEL_ZOO_GLOBS for n in _names(model, g)}
    assert set(names) == set(skipped) | matched | {n for n in names if n.endswith("bias")}
    assert "model.embedding_layer.word_embeddings.weight" in names  # tied: the head shares it
    assert model.model.lm_head.weight is model.model.embedding_layer.word_embeddings.weight
    untied = GPT(n_layer=1, n_head=2, n_embd=16, block_size=8, tie_weights=False)
    assert "model.lm_head.weight" in dict(untied.named_parameters())


def test_gpt_is_causal_and_initialised_as_gpt2():
    torch.manual_seed(0)
    model = GPT(n_layer=4, n_head=4, n_embd=64, block_size=16)
    ids = torch.randint(0, 256, (2, 16))
    changed = ids.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 256
    with torch.no_grad():
        before, after = model.logits(ids), model.logits(changed)
    torch.testing.assert_close(before[:, :9], after[:, :9])
    assert not torch.allclose(before[:, 9:], after[:, 9:])
    weights = torch.cat([model.get_parameter(n).detach().flatten() for n in _q_names(model)])
    assert float(weights.std()) == pytest.approx(0.02, rel=0.05)
    layer = model.model.transformer_decoder.layers[0]
    residual = layer.self_attn.proj_output_dense_layer.weight.detach()
    assert float(residual.std()) == pytest.approx(0.02 / math.sqrt(8), rel=0.1)
    assert not layer.ffn.ffn[0].linear_layer.bias.any()


def _q_names(model: torch.nn.Module) -> list[str]:
    return _names(model, "*proj_q_dense_layer.weight")


def test_gpt_loss_is_the_mean_cross_entropy_of_the_scored_tokens():
    torch.manual_seed(0)
    model = GPT(n_layer=1, n_head=2, n_embd=16, block_size=8)
    ids = torch.randint(0, 256, (3, 8))
    labels = torch.randint(0, 256, (3, 8))
    labels[0, :3] = -100
    result = model({"input_ids": ids, "labels": labels})
    logits = model({"input_ids": ids})
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), labels.reshape(-1))
    torch.testing.assert_close(result["loss"], expected)
    assert result["num_examples"] == 21
    assert set(result) == {"loss", "accuracy", "num_examples"}
    with pytest.raises(ValueError, match="longer than max_position_embeddings \\(8\\)"):
        model.logits(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="n_embd \\(10\\) must be a multiple of n_head \\(4\\)"):
        GPT(n_embd=10, n_head=4)


def test_gpt_trains_under_bfloat16_autocast(tmp_path):
    from plugtrain.backend_base import release_backend_type

    release_backend_type()
    torch.manual_seed(0)
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path,
        model=lambda: GPT(n_layer=1, n_head=2, n_embd=32, block_size=32),
        optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3),
        precision={"fp16_type": "bfloat16", "max_gradient_norm": 1.0},
        loop={"max_steps": 3},
        logging={"log_steps": 1, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
    )
    seen: list[torch.dtype] = []
    trainer.model.model.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    data = stdlib_text_loader(batch_size=4, block_size=32, max_bytes=50_000)
    val = stdlib_text_loader(batch_size=8, block_size=32, split="val", max_bytes=50_000)
    metrics = trainer.fit(data, val)
    release_backend_type()
    assert seen[:3] == [torch.bfloat16] * 3
    assert set(metrics) == {"loss", "perplexity", "accuracy"}
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]))


# -- the example, through the CLI -----------------------------------------------------------


def _fit(tmp_path: Path, model_dir: Path, *overrides: str, command: str = "fit") -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    sets = [f"trainer.init.model_dir={model_dir}", *overrides]
    done = subprocess.run(
        [sys.executable, "-m", "plugtrain", command, str(EXAMPLE)]
        + [part for value in sets for part in ("--set", value)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _fit_here(
    tmp_path: Path,
    model_dir: Path,
    *overrides: str,
    monkeypatch: pytest.MonkeyPatch,
    command: str = "fit",
) -> None:
    """:func:`_fit` through ``plugtrain.cli.main`` in this process: for the runs the others are
    compared with, and ones whose files or printed records are all that is read, saving an
    interpreter each."""
    from plugtrain.bases.backend import release_backend_type
    from plugtrain.cli import main

    sets = [f"trainer.init.model_dir={model_dir}", *overrides]
    monkeypatch.chdir(tmp_path)
    release_backend_type()
    try:
        status = main([command, str(EXAMPLE), *(p for value in sets for p in ("--set", value))])
    finally:
        release_backend_type()
    assert status == 0


def _metrics(model_dir: Path, split: str) -> list[dict[str, Any]]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["model"]  # type: ignore[no-any-return]


SHORT = (
    "trainer.init.loop={max_steps: 40, eval_frequency: 40, eval_steps: 2}",
    "trainer.init.logging={log_steps: 10}",
    "trainer.init.checkpoint={steps: 20}",
)


@pytest.mark.slow
def test_the_example_trains_and_validate_all_reports_perplexity(tmp_path, monkeypatch, capsys):
    model_dir = tmp_path / "run"
    _fit(tmp_path, model_dir, *SHORT)
    train = _metrics(model_dir, "train")
    assert [r["step"] for r in train] == [10, 20, 30, 40]
    assert train[-1]["loss"] < train[0]["loss"] - 1.0
    val = _metrics(model_dir, "val")[-1]
    assert val["loss"] < math.log(256) - 1.5
    assert val["perplexity"] == pytest.approx(math.exp(val["loss"]))
    capsys.readouterr()
    _fit_here(tmp_path, model_dir, *SHORT, monkeypatch=monkeypatch, command="validate_all")
    records = capsys.readouterr().out.splitlines()  # "trainer 0: validation of ..." each
    assert len([line for line in records if "perplexity" in line]) >= 2  # checkpoints 20, 40


@pytest.mark.slow
def test_the_example_resumes_bit_for_bit(tmp_path, monkeypatch):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    steps = "trainer.init.loop={max_steps: %d, eval_frequency: 200, eval_steps: 1}"
    checkpoints = "trainer.init.checkpoint={steps: 4}"
    _fit_here(tmp_path, straight, steps % 8, checkpoints, monkeypatch=monkeypatch)  # reference
    _fit(tmp_path, resumed, steps % 4, checkpoints)
    output = _fit(tmp_path, resumed, steps % 8, checkpoints)
    assert "resumed from" in output
    mine, theirs = _weights(resumed / "checkpoint_8.mdl"), _weights(straight / "checkpoint_8.mdl")
    assert mine.keys() == theirs.keys()
    for name in mine:
        assert torch.equal(mine[name], theirs[name]), name


@pytest.mark.slow
def test_the_example_on_two_processes_matches_one_process(tmp_path, monkeypatch):
    """Two gloo processes of 8 sequences each = one process of the 16 (no shuffling)."""
    one, two = tmp_path / "one", tmp_path / "two"
    common = (
        "trainer.init.loop={max_steps: 6, eval_frequency: 6, eval_steps: 4}",
        "trainer.init.logging={log_steps: 2}",
        "trainer.init.checkpoint={steps: 6}",
        "trainer.init.precision.enabled=false",
    )
    data = (
        "trainer.fit.train_dataloader="
        "{StdlibText: {batch_size: %d, block_size: 64, shuffle: false}}"
    )
    _fit_here(tmp_path, one, *common, data % 16, monkeypatch=monkeypatch)  # the reference
    output = _fit(
        tmp_path,
        two,
        *common,
        data % 8,
        "trainer.init.backend={backend_type: CPU, num_processes: 2, dist_timeout: 60}",
    )
    assert "starting 2 processes with torchrun" in output
    mine, theirs = _weights(two / "checkpoint_6.mdl"), _weights(one / "checkpoint_6.mdl")
    for name in mine:
        torch.testing.assert_close(mine[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)
    for a, b in zip(_metrics(two, "train"), _metrics(one, "train"), strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-6)
    val_two, val_one = _metrics(two, "val")[-1], _metrics(one, "val")[-1]
    assert val_two["loss"] == pytest.approx(val_one["loss"], rel=1e-5)


@pytest.mark.slow
def test_model_zoo_s_rigl_globs_sparsify_the_gpt_s_projections_only(tmp_path, monkeypatch):
    """Model Zoo GPT-3 RigL's param_filter globs select exactly the 12 projection matrices."""
    model_dir = tmp_path / "run"
    globs = ", ".join(f"'{glob}'" for glob in MODEL_ZOO_GLOBS)
    sparsity = (
        "trainer.init.sparsity={sparsity: 0.75, init_method: random, algorithm: rigl, "
        "drop_fraction: {type: cosine, init: 0.3, half_period: 6}, update: {freq: 2, stop: 6}, "
        "param_filter: [" + globs + "]}"
    )
    _fit_here(
        tmp_path,
        model_dir,
        "trainer.init.loop={max_steps: 8, eval_frequency: 8, eval_steps: 1}",
        "trainer.init.precision.enabled=false",
        sparsity,
        monkeypatch=monkeypatch,
    )
    weights = _weights(model_dir / "checkpoint_8.mdl")
    sparse = {n for n, w in weights.items() if n.endswith("weight") and bool((w == 0).any())}
    expected = {n for g in MODEL_ZOO_GLOBS for n in _names(GPT(n_layer=2, n_embd=64), g)}
    assert sparse == expected
    assert len(expected) == 12
    for name in expected:
        assert float((weights[name] == 0).float().mean()) == pytest.approx(0.75, abs=0.01)
