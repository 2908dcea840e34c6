"""``validate`` scores a trained model or says why it cannot; evaluating nothing is an error.

Without a checkpoint to load (a mistyped ``model_dir``, an empty one) ``validate`` is an error
unless ``ckpt_path: null`` asks for the untrained model. An evaluation set that yields no example
is an error, in ``validate`` and (before the first step) in ``fit``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.reliability import finish_process, last_line, start_plugtrain

import plugtrain
from plugtrain.builtin.models import MLP
from plugtrain.cli import main
from plugtrain.errors import CheckpointError, TrainingError
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 2
    model:
      MLP: {{in_features: 16, hidden: 8, out_features: 4}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 5}}
    logging: {{log_steps: 5}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 16, num_classes: 4}}
    val_dataloader:
      Synthetic: {{batch_size: {val_batch}, num_examples: {val_examples}, in_features: 16,
                   num_classes: 4, split: val, drop_last: true}}
{validate}"""


def _write(
    folder: Path,
    model_dir: Path,
    *,
    validate: str = "",
    val_batch: int = 16,
    val_examples: int = 64,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    text = RUN.format(
        model_dir=model_dir, validate=validate, val_batch=val_batch, val_examples=val_examples
    )
    path.write_text(text)
    return path


UNTRAINED = """\
  validate:
    ckpt_path: null
    val_dataloader:
      Synthetic: {batch_size: 16, num_examples: 64, in_features: 16, num_classes: 4, split: val}
"""


@pytest.mark.slow
def test_v01_validate_without_a_checkpoint_is_an_error_unless_ckpt_path_is_null(tmp_path):
    trained = tmp_path / "model"
    run = _write(tmp_path, trained)
    assert main(["fit", str(run)]) == 0  # the checkpoint to validate, made in this process
    scored = finish_process(start_plugtrain("validate", str(run)))
    assert scored.status == 0, scored.err
    assert f"resumed from {trained / 'checkpoint_5.mdl'} at step 5" in scored.err

    mistyped = tmp_path / "modle"
    outcome = finish_process(start_plugtrain("validate", str(_write(tmp_path / "x", mistyped))))
    assert outcome.status == 1, outcome.err
    assert "Traceback" not in outcome.err
    assert "validation" not in outcome.out
    assert last_line(outcome.err) == (
        f"plugtrain: error: {mistyped}: no checkpoint to validate (no sound file named "
        "checkpoint_{step}.mdl; the folder does not exist); give ckpt_path a checkpoint, or "
        "ckpt_path: null to evaluate the untrained model"
    )

    untrained = _write(tmp_path / "y", mistyped, validate=UNTRAINED)
    asked = finish_process(start_plugtrain("validate", str(untrained)))
    assert asked.status == 0, asked.err
    assert "trainer 0: validation loss " in asked.out


def _trainer(model_dir: Path) -> Trainer:
    sgd = plugtrain.resolve("optimizer", "SGD")
    return Trainer(
        device="CPU",
        model_dir=model_dir,
        model=lambda: MLP(in_features=16, out_features=4, hidden=8),
        optimizer=lambda model: sgd(model.parameters(), lr=0.1),
        loop={"max_steps": 3},
        logging={"log_steps": 1},
        seed=1,
    )


def test_v01_an_empty_model_dir_has_nothing_to_validate(tmp_path):
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(8, 16), torch.randint(0, 4, (8,))),
        batch_size=4,
    )
    with pytest.raises(CheckpointError, match=r"no checkpoint to validate \(no sound file"):
        _trainer(tmp_path).validate(data)
    assert set(_trainer(tmp_path).validate(data, ckpt_path=None)) == {"loss", "accuracy"}
    fitted = _trainer(tmp_path / "fitted")
    fitted.fit(data)
    assert fitted.validate(data)  # its own checkpoint, just written


@pytest.mark.slow
def test_v02_an_empty_evaluation_set_is_an_error(tmp_path):
    # 5 examples in batches of 16 with drop_last: no batch at all.
    trained = tmp_path / "model"
    run = _write(tmp_path, trained, val_batch=16, val_examples=5)
    refused = finish_process(start_plugtrain("fit", str(run)))
    assert refused.status == 1, refused.err
    empty_data = "the evaluation data (val_dataloader) is empty: it yields no example"
    assert last_line(refused.err) == f"plugtrain: error: {empty_data}"
    assert not list(trained.glob("*.mdl"))  # refused before the first step

    assert main(["fit", str(_write(tmp_path, trained))]) == 0  # a checkpoint, made here
    empty = _write(tmp_path, trained, val_batch=16, val_examples=5)
    outcome = finish_process(start_plugtrain("validate", str(empty)))
    assert outcome.status == 1, outcome.err
    assert "loss 0.0000" not in outcome.out
    assert last_line(outcome.err) == f"plugtrain: error: {empty_data}"


def test_v02_an_evaluation_iterable_without_length_that_yields_nothing(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.raises(TrainingError, match=r"the evaluation data \(val_dataloader\) is empty"):
        trainer.evaluate(iter(()))
