"""DPO trains: Model Zoo's run file as written, data in its HDF5 format, exact resume, SFT start.

Model Zoo's ``params_zephyr_7b_dpo.yaml`` (its model and data sections, as written) passes
``check``; with the decoders' size overrides it trains 10 steps on DPO HDF5 files laid out as
Model Zoo's preprocessor writes them. An interrupted DPO fit resumes bit-equal, and a DPO fit
starts from an SFT run's checkpoint (policy and reference both from it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import plugtrain_callbacks.checkpoints
import pytest
import torch
import yaml

import plugtrain
from plugtrain.config import check_run
from plugtrain.config.reading.yaml_loader import load_yaml
from plugtrain.registry import Registry
from plugtrain.testing import trainer_run
from plugtrain_models.dpo.data import dpo_hdf5_loader
from plugtrain_models.dpo.model import DpoModel, dpo
from plugtrain_models.dpo.schemas import DPO_FEATURES
from plugtrain_models.families import build_decoder

ZEPHYR = yaml.safe_load((Path(__file__).parent / "data" / "modelzoo_dpo_zephyr.yaml").read_text())
VOCAB, S = 512, 32


def write_dpo_files(folder: Path, count: int, seed: int = 0) -> Path:
    """DPO samples ``[N, 6, S]`` int32 as Model Zoo's preprocessor writes them (two files)."""
    rng = np.random.default_rng(seed)
    samples = np.zeros((count, 6, S), dtype=np.int32)
    for n in range(count):
        prompt = rng.integers(2, VOCAB, int(rng.integers(3, 10)))
        for side in range(2):
            response = rng.integers(2, VOCAB, int(rng.integers(2, 12)))
            tokens = np.concatenate([prompt, response, [1]])[: S + 1]
            row = samples[n, 3 * side : 3 * side + 3]
            row[0, : len(tokens) - 1] = tokens[:-1]
            row[2, : len(tokens) - 1] = tokens[1:]
            row[1, len(prompt) - 1 : len(tokens) - 1] = 1  # the response and its end token
    folder.mkdir(parents=True)
    half = count // 2
    for index, part in enumerate((samples[:half], samples[half:])):
        with h5py.File(folder / f"output_chunk_0_{index}.h5", "w") as file:
            file.create_dataset("data", data=part, compression="gzip", chunks=(1, 6, S))
            file.attrs["n_examples"] = part.shape[0]
    params = {"features": list(DPO_FEATURES), "processing": {"vocab_size": VOCAB, "pad_id": 0}}
    (folder / "data_params.json").write_text(json.dumps(params))
    return folder


def shrunk_policy(section: dict[str, Any]) -> dict[str, Any]:
    """The decoders' size overrides of Model Zoo's files, applied to the policy only."""
    shrunk = dict(section)
    shrunk.update(
        hidden_size=64, num_heads=4, num_hidden_layers=2, filter_size=128, vocab_size=VOCAB,
        max_position_embeddings=64, rotary_dim=16, attention_sliding_window_length=16,
        extra_attention_params={"num_kv_groups": 2},
    )  # fmt: skip
    return shrunk


class Recorder:
    """Keeps every step's logged metrics."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Keep ``metrics``."""
        self.steps.append(dict(metrics))


def test_model_zoos_dpo_run_file_checks_as_written(
    installed_registry: Registry, tmp_path: Path
) -> None:
    loader = {**ZEPHYR["train_dataloader"], "data_dir": str(write_dpo_files(tmp_path / "d", 8))}
    init = {"backend": {"backend_type": "CPU"}, "model": ZEPHYR["model"],
            "optimizer": {"AdamW": {"lr": 1e-3}}, "loop": {"max_steps": 10}}  # fmt: skip
    text = yaml.safe_dump(trainer_run(init, fit={"train_dataloader": loader}), sort_keys=False)
    plans = check_run(load_yaml(text, "zephyr.yaml"), installed_registry, "zephyr.yaml")
    assert plans[0].model is not None
    assert plans[0].model.name == "dpo"
    bad = {**ZEPHYR["model"], "policy_model": {**ZEPHYR["model"]["policy_model"], "num_heads": 0}}
    init["model"] = bad
    text = yaml.safe_dump(trainer_run(init, fit={"train_dataloader": loader}), sort_keys=False)
    with pytest.raises(plugtrain.errors.ConfigError, match=r"policy_model\.num_heads"):
        check_run(load_yaml(text, "bad.yaml"), installed_registry, "bad.yaml")


def _zephyr_model() -> DpoModel:
    model = dict(ZEPHYR["model"])
    model["policy_model"] = shrunk_policy(model["policy_model"])
    model.pop("name")
    return dpo(**model)


def _loader(folder: Path, shuffle: bool = True) -> Any:
    data = {**ZEPHYR["train_dataloader"], "data_dir": str(folder), "batch_size": 4}
    data.update(num_workers=0, shuffle=shuffle)  # two cores; the sizes only
    data.pop("data_processor")
    return dpo_hdf5_loader(**data)


def _trainer(
    model_dir: Path, steps: int, recorder: Recorder | None = None, *others: Any
) -> plugtrain.Trainer:
    torch.manual_seed(5)
    return plugtrain.Trainer(
        device="CPU", model_dir=model_dir, model=_zephyr_model(),
        optimizer={"AdamW": {"lr": 1e-3}}, loop={"max_steps": steps},
        checkpoint={"steps": 3}, logging={"log_steps": 1}, seed=3,
        callbacks=[*([recorder] if recorder is not None else []), *others],
    )  # fmt: skip


def test_model_zoos_dpo_model_trains_ten_steps_on_its_data_format(tmp_path: Path) -> None:
    folder = write_dpo_files(tmp_path / "data", 64)
    recorder = Recorder()
    trainer = _trainer(tmp_path / "run", 10, recorder)
    trainer.fit(_loader(folder))
    losses = [step["loss"] for step in recorder.steps]
    assert len(losses) == 10
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference at step 0
    assert losses[-1] < losses[0]
    last = recorder.steps[-1]
    assert last["reward_margins"] == pytest.approx(
        last["chosen_rewards"] - last["rejected_rewards"], abs=1e-6
    )
    model = trainer.unwrapped_model
    assert isinstance(model, DpoModel)
    assert model.reference is not None
    assert not model.reference.training
    assert not any(p.requires_grad for p in model.reference.parameters())
    evaluated = trainer.validate(_loader(folder, shuffle=False), ckpt_path=None)
    assert evaluated["reward_accuracies"] > 0.5  # compute_eval_metrics: true
    assert math.isfinite(evaluated["loss"])


def test_an_interrupted_dpo_fit_resumes_bit_equal(tmp_path: Path) -> None:
    folder = write_dpo_files(tmp_path / "data", 64)
    straight = _trainer(tmp_path / "straight", 6)
    straight.fit(_loader(folder, shuffle=False))
    first = _trainer(tmp_path / "interrupted", 3)
    first.fit(_loader(folder, shuffle=False))
    saved = torch.load(first.checkpoint_path(3), weights_only=True)["model"]
    assert any(name.startswith("ref_model.") for name in saved)
    resumed = _trainer(tmp_path / "interrupted", 6)
    resumed.fit(_loader(folder, shuffle=False))
    assert resumed.loaded_step == 3
    expected = straight.unwrapped_model.state_dict()
    got = resumed.unwrapped_model.state_dict()
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def test_a_dpo_fit_starts_from_an_sft_runs_checkpoint(tmp_path: Path) -> None:
    keys = shrunk_policy(ZEPHYR["model"]["policy_model"])
    family = keys.pop("name")
    torch.manual_seed(11)
    sft = plugtrain.Trainer(
        device="CPU", model_dir=tmp_path / "sft", model=build_decoder(family, keys),
        optimizer={"AdamW": {"lr": 1e-3}}, loop={"max_steps": 2}, seed=2,
    )  # fmt: skip
    ids = torch.randint(0, VOCAB, (8, 17), generator=torch.Generator().manual_seed(3))
    rows = [{"input_ids": t[:-1], "labels": t[1:]} for t in ids]
    sft.fit(torch.utils.data.DataLoader(rows, batch_size=4))
    tuned = {n: t.clone() for n, t in sft.unwrapped_model.state_dict().items()}
    # Model Zoo's DPO file loads only the model of the SFT run's checkpoint (its callback)
    states = plugtrain_callbacks.checkpoints.LoadCheckpointStates(load_checkpoint_states="model")
    recorder = Recorder()
    trainer = _trainer(tmp_path / "run", 1, recorder, states)
    trainer.fit(
        _loader(write_dpo_files(tmp_path / "data", 8)), ckpt_path=str(sft.checkpoint_path(2))
    )
    model = trainer.unwrapped_model
    assert isinstance(model, DpoModel)
    assert model.reference is not None
    for name, tensor in tuned.items():  # the reference is the SFT model, unchanged
        assert torch.equal(model.reference.state_dict()[name], tensor), name
    assert recorder.steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
