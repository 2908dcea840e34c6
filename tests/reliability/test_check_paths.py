"""``check`` refuses paths and file names that would fail later (A05-A06), in-process."""

from __future__ import annotations

import pytest
from support.reliability import error_lines, run_cli, write_train_run


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("model_dir: {model_dir}", 'model_dir: ""', "trainer.init.model_dir"),
        ("model_dir: {model_dir}", 'model_dir: "   "', "trainer.init.model_dir"),
        (
            "checkpoint: {{steps: {every}}}",
            'checkpoint: {{steps: {every}, checkpoint_root: ""}}',
            "trainer.init.checkpoint.checkpoint_root",
        ),
        (
            "train_dataloader:",
            'ckpt_path: " "\n    train_dataloader:',
            "trainer.fit.ckpt_path",
        ),
    ],
)
def test_a05_empty_or_blank_paths_are_refused_by_check(tmp_path, keep_registry, old, new, key):
    run = write_train_run(tmp_path, steps=4, every=2)
    text = run.read_text()
    template_old = old.replace("{model_dir}", str(tmp_path / "model")).format(every=2)
    template_new = new.format(every=2)
    assert template_old in text
    run.write_text(text.replace(template_old, template_new))
    outcome = run_cli("check", str(run))
    assert outcome.status == 2, outcome  # was: exit 0, and fit wrote into the current folder
    (issue,) = error_lines(outcome.err)
    assert issue.startswith(f"{run}:"), issue
    assert f": {key}: must name a folder or file, got " in issue
    assert "(an unset environment variable?); an empty path would mean the current folder" in issue


def test_a06_a_checkpoint_name_over_the_file_name_limit_is_refused_by_check(
    tmp_path, keep_registry
):
    long_name = "c" * 230 + "_{step}.mdl"
    run = write_train_run(
        tmp_path,
        steps=4,
        every=2,
        **{"checkpoint: {steps: 2}": f"checkpoint: {{steps: 2, checkpoint_name: '{long_name}'}}"},
    )
    outcome = run_cli("check", str(run))
    assert outcome.status == 2, outcome  # was: exit 0, then fit failed after its first steps
    (issue,) = error_lines(outcome.err)
    assert "trainer.init.checkpoint.checkpoint_name: is too long a file name: with a 20-digit " in (
        issue
    )
    assert "it is 265 bytes, over the 255-byte limit of file systems" in issue
    fine = write_train_run(
        tmp_path / "fine",
        steps=4,
        every=2,
        **{"checkpoint: {steps: 2}": "checkpoint: {steps: 2, checkpoint_name: 'c{step}.mdl'}"},
    )
    assert run_cli("check", str(fine)).status == 0
