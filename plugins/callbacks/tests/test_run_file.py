"""A Model Zoo style run file using the built-in callbacks and loggers, through ``plugtrain fit``.

Runs in a subprocess, as a user would: checked, trained on CPU, then read back from the files it
wrote (metrics, checkpoints, TensorBoard events).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from plugtrain.testing import run_plugtrain, write_run_file

pytestmark = pytest.mark.slow

# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 2
    model: {{MLP: {{in_features: 64, hidden: 32, out_features: 10}}}}
    optimizer: {{SGD: {{lr: 0.05, momentum: 0.9}}}}
    loop: {{max_steps: 12, eval_frequency: 6, eval_steps: 2}}
    checkpoint: {{steps: 3}}
    logging: {{log_steps: 3}}
    callbacks:
      - ComputeNorm: {{}}
      - CheckLoss: {{}}
      - RateProfiler: {{}}
      - LogOptimizerParamGroup: {{keys: momentum}}
      - KeepNCheckpoints: {{n: 2}}
      - ScopedTrainFlags:
          csx.performance.micro_batch_size: 2
      - ScopedValidateFlags:
          csx.performance.micro_batch_size: 2
      - GlobalFlags: {{csx.debug.retrace_every_iteration: false}}
      - LoadCheckpointStates: {{load_checkpoint_states: all}}
    loggers:
      - ProgressLogger: null
      - TensorBoardLogger: {{}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 32}}}}
    val_dataloader: {{Digits: {{batch_size: 128, split: val}}}}
"""


def test_a_run_file_with_every_built_in_callback_trains_on_cpu(tmp_path):
    model_dir = tmp_path / "run"
    run = write_run_file(tmp_path, RUN.format(model_dir=model_dir))
    checked = run_plugtrain("check", run, subprocess_run=True, cwd=tmp_path)
    assert checked.status == 0, checked.err
    done = run_plugtrain("fit", run, subprocess_run=True, cwd=tmp_path)
    assert done.status == 0, done.err
    inactive = [line for line in done.err.splitlines() if "only act on the CSX" in line]
    assert len(inactive) == 2  # once per flag, not per callback or evaluation
    assert "the flags csx.performance.micro_batch_size only act" in inactive[0]
    assert "the flags csx.debug.retrace_every_iteration only act" in inactive[1]
    records = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [3, 6, 9, 12]
    for record in train:
        assert record["model_wise_grad_norm"] > 0
        assert record["model_wise_params_norm"] > 0
        assert record["rate/samples_per_second"] > 0
        assert record["momentum/0"] == pytest.approx(0.9)
    assert [r["step"] for r in records if r["split"] == "val"] == [6, 12]
    kept = sorted(p.name for p in model_dir.glob("checkpoint_*.mdl"))
    assert kept == ["checkpoint_12.mdl", "checkpoint_9.mdl"]
    assert list((model_dir / "events").glob("events.out.tfevents.*"))
    assert "step 12/12" not in done.err  # ProgressLogger: null removed the progress lines


def test_check_of_that_run_file_imports_no_torch_and_no_logger_package(tmp_path):
    run = write_run_file(tmp_path, RUN.format(model_dir=tmp_path / "run"))
    code = (
        "import sys\n"
        "from plugtrain.cli import main\n"
        "status = main(['check', sys.argv[1]])\n"
        "heavy = {'torch', 'tensorboard', 'wandb', 'mlflow'} & set(sys.modules)\n"
        "assert not heavy, f'imported: {sorted(heavy)}'\n"
        "sys.exit(status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(run)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=HANG_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr
