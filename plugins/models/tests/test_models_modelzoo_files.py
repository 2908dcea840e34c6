"""Model Zoo 2.10's 72 decoder model sections check as written and train (SPEC-models 6.2).

``data/modelzoo_decoder_models.yaml`` holds every decoder run file's ``model:`` section as
Cerebras wrote it. Each must pass ``check`` unchanged inside a run file (every key of section
1.1 accepted), then build with only the spec's size overrides and take 10 finite training
steps; two of them also run through ``plugtrain fit`` in-process.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from plugtrain.config import check_run
from plugtrain.config.reading.yaml_loader import load_yaml
from plugtrain.registry import Registry
from plugtrain.testing import run_plugtrain, trainer_run, write_run_file
from plugtrain_models.families import build_decoder

SECTIONS: dict[str, dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "data" / "modelzoo_decoder_models.yaml").read_text(encoding="utf-8")
)
EXPECTED_WARNINGS = ("num_kv_groups: using 1", "has no effect with loss_scaling: num_tokens")


def _run_file(model: dict[str, Any], max_steps: int = 10) -> dict[str, Any]:
    init = {
        "backend": {"backend_type": "CPU"},
        "model": model,
        "optimizer": {"AdamW": {"lr": 1e-3}},
        "loop": {"max_steps": max_steps},
        "checkpoint": {"steps": max_steps},
        "logging": {"log_steps": 1},
    }
    fit = {"train_dataloader": {"StdlibText": {"batch_size": 4, "block_size": 32}}}
    return trainer_run(init, fit=fit)


def _shrunk(section: dict[str, Any]) -> dict[str, Any]:
    """The spec's size overrides (SPEC-models 6.2) and nothing else."""
    shrunk = dict(section)
    heads, hidden = section.get("num_heads", 12), section.get("hidden_size", 768)
    head_dim = (section.get("attention_inner_dim") or hidden) // heads
    shrunk.update(
        hidden_size=64, num_heads=4, num_hidden_layers=2, filter_size=128, vocab_size=512,
        max_position_embeddings=64,
    )  # fmt: skip
    extra = section.get("extra_attention_params")
    if extra and extra.get("num_kv_groups", 1) > 1:
        shrunk["extra_attention_params"] = {**extra, "num_kv_groups": 2}
    if section.get("attention_inner_dim") is not None:
        shrunk["attention_inner_dim"] = 64
    if section.get("rotary_dim") is not None:
        shrunk["rotary_dim"] = 16 if section["rotary_dim"] == head_dim else 4
    if section.get("attention_sliding_window_length") is not None:
        shrunk["attention_sliding_window_length"] = 16
    if section.get("mup_base_hidden_size") is not None:
        shrunk.update(mup_base_hidden_size=32, mup_base_filter_size=64)
    for key in ("moe", "moe_params"):
        if section.get(key):
            shrunk[key] = {**section[key], "num_experts": min(section[key]["num_experts"], 4)}
    return shrunk


def test_the_set_is_model_zoos_72_decoder_files() -> None:
    families = [s.get("name") or s.get("model_name") for s in SECTIONS.values()]
    counts = {family: families.count(family) for family in set(families)}
    assert counts == {
        "gpt3": 25, "llama": 19, "jais": 5, "mixtral": 4, "starcoder": 4, "falcon": 3,
        "gemma2": 3, "gptj": 3, "btlm": 2, "mistral": 2, "bloom": 1, "santacoder": 1,
    }  # fmt: skip


def test_every_section_checks_as_written(installed_registry: Registry) -> None:
    for origin, section in SECTIONS.items():
        text = yaml.safe_dump(_run_file(section), sort_keys=False)
        plans = check_run(load_yaml(text, origin), installed_registry, origin)
        family = section.get("name") or section.get("model_name")
        assert plans[0].model is not None, origin
        assert plans[0].model.name == family, origin


def _train(section: dict[str, Any], steps: int) -> list[float]:
    arguments = _shrunk(section)
    family = arguments.pop("name", None) or arguments.pop("model_name")
    for key in ("attention_softmax_fp32", "attention_kernel", "fold_rope_consts"):
        arguments.pop(key, None)  # CSX-only: check drops them (with a warning) in a run file
    if family not in ("gptj", "falcon"):
        arguments.pop("boundary_casting", None)
        arguments.pop("attention_sink_tokens", None)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = build_decoder(family, arguments)
    for warning in caught:
        assert any(text in str(warning.message) for text in EXPECTED_WARNINGS), warning
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 512, (4, 33), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(4, 32, dtype=torch.int32)
    mask[0, 20:] = 0
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "attention_mask": mask}
    losses = []
    for _ in range(steps):
        loss = model(batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_every_section_trains_ten_finite_steps_with_only_size_overrides() -> None:
    for origin, section in SECTIONS.items():
        losses = _train(section, steps=10)
        assert all(math.isfinite(loss) for loss in losses), (origin, losses)
        assert losses[-1] < losses[0], (origin, losses)  # one batch, 10 steps: it must fit


@pytest.mark.parametrize(
    "origin",
    [
        "models/nlp/gpt3/configs/Cerebras_GPT/111m_mup.yaml",
        "models/nlp/mixtral/configs/params_moe_111M_with_shared_expert.yaml",
    ],
)
def test_a_model_zoo_section_fits_through_plugtrain(origin: str, tmp_path: Path) -> None:
    run = _run_file(_shrunk(SECTIONS[origin]), max_steps=3)
    run["trainer"]["init"]["model"]["vocab_size"] = 256  # StdlibText's bytes
    run["trainer"]["init"]["model_dir"] = str(tmp_path / "model_dir")
    assert run_plugtrain("fit", write_run_file(tmp_path, run)).status == 0
    assert (tmp_path / "model_dir" / "checkpoint_3.mdl").exists()
