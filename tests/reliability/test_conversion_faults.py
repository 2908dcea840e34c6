"""``checkpoint convert`` under races, full and read-only disks and earlier kills; a fit's
record temporaries after a kill."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("safetensors")
pytest.importorskip("transformers")

import torch
from support.hf_models import random_hf_model, save_hf
from support.reliability import (
    finish_process,
    run_cli,
    small_data,
    small_trainer,
    start_plugtrain,
    tmpfs,
    wait_until,
)

LLAMA = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face Llama (about 60 KB of weights)."""
    import transformers

    folder = tmp_path_factory.mktemp("hf") / "llama"
    model = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    return save_hf(model, folder)


@pytest.fixture(scope="module")
def converted(hf_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The Llama as a plugtrain checkpoint and its model YAML."""
    out = tmp_path_factory.mktemp("converted")
    done = _to_plugtrain(hf_folder, out)
    assert done.status == 0, done.err
    return out / "model_to_plugtrain.mdl", out / "config_to_plugtrain.yaml"


def _to_plugtrain(folder: Path, out: Path, config: Path | None = None):
    return run_cli(
        "checkpoint", "convert", str(folder), "--config",
        str(config or folder / "config.json"), "--src-fmt", "hf", "--tgt-fmt", "plugtrain",
        "--output-dir", str(out),
    )  # fmt: skip


def _to_hf(checkpoint: Path, config: Path, out: Path):
    return run_cli(
        "checkpoint", "convert", str(checkpoint), "--config", str(config), "--src-fmt",
        "plugtrain", "--tgt-fmt", "hf", "--output-dir", str(out),
    )  # fmt: skip


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_x04_two_exports_into_one_folder_keep_the_first_and_refuse_the_second(
    tmp_path: Path,
) -> None:
    from plugtrain.conversion import ConversionError
    from plugtrain.conversion.hf_files import ShardedWriter, iter_hf_tensors

    target = tmp_path / "out"
    first = ShardedWriter(target, 10**6, safetensors=True)
    second = ShardedWriter(target, 10**6, safetensors=True)  # both started before either ends
    assert first.staging != second.staging
    first.add("a", torch.ones(3))
    second.add("a", torch.zeros(3))
    with first:
        pass
    with (
        pytest.raises(ConversionError, match="another conversion wrote this folder") as refused,
        second,
    ):
        pass
    assert str(target) in str(refused.value)
    assert torch.equal(dict(iter_hf_tensors(target))["a"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_x04_a_conversion_finishing_first_keeps_its_file(tmp_path: Path) -> None:
    from plugtrain.conversion import ConversionError
    from plugtrain.conversion.writing import write_converted

    checkpoint, config = tmp_path / "m_to_plugtrain.mdl", tmp_path / "c_to_plugtrain.yaml"

    def save_while_another_finishes(path: Path) -> None:
        path.write_bytes(b"mine")
        checkpoint.write_bytes(b"theirs")  # the other conversion renames its file in place

    with pytest.raises(ConversionError, match="another conversion wrote it while this one ran"):
        write_converted(checkpoint, config, "model: {}\n", save_while_another_finishes)
    assert checkpoint.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [checkpoint.name]


def test_x09_converting_into_a_folder_holding_a_conversion_is_refused(
    hf_folder: Path, converted: tuple[Path, Path], tmp_path: Path
) -> None:
    checkpoint, _ = converted
    before = checkpoint.read_bytes()
    done = _to_plugtrain(hf_folder, checkpoint.parent)
    assert done.status == 1, done.err
    assert f"{checkpoint}: already exists (choose a new output folder" in done.err
    assert checkpoint.read_bytes() == before
    # the export direction says the same about its folder
    export = tmp_path / "export"
    assert _to_hf(*converted, export).status == 0
    again = _to_hf(*converted, export)
    assert again.status == 1
    assert "already exists (choose a new output folder)" in again.err


def test_x10_a_full_or_read_only_disk_is_named_and_leaves_nothing(
    hf_folder: Path, converted: tuple[Path, Path], tmp_path: Path
) -> None:
    with tmpfs(tmp_path, "40k") as disk:
        done = _to_plugtrain(hf_folder, disk)
        assert done.status == 1, done.err
        assert f"no space left on {disk}" in done.err, done.err
        assert "internal error" not in done.err
        assert "unexpected pos" not in done.err
        assert list(disk.iterdir()) == []
        done = _to_hf(*converted, disk)
        assert done.status == 1, done.err
        assert f"no space left on {disk / 'model_to_plugtrain_to_hf'}" in done.err, done.err
        assert "SafetensorError" not in done.err
        assert list(disk.iterdir()) == []
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        for done in (_to_plugtrain(hf_folder, disk), _to_hf(*converted, disk)):
            assert done.status == 1, done.err
            assert f"cannot write {disk}" in done.err, done.err
            assert "read-only file system" in done.err
            assert "internal error" not in done.err
        assert list(disk.iterdir()) == []


def test_x11_a_rerun_removes_what_a_killed_conversion_of_its_own_left(
    hf_folder: Path, converted: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dead, alive = _dead_pid(), 1  # pid 1 runs as long as the machine does
    left = [
        out / f".model_to_plugtrain.mdl.partial-{dead}-0123abcd",
        out / f"..model_to_plugtrain.mdl.partial-{dead}-0123abcd.9f8e7d6c",
    ]
    running = out / f".model_to_plugtrain.mdl.partial-{alive}-0123abcd"
    for path in (*left, running):
        path.write_bytes(b"x" * 1000)
    done = _to_plugtrain(hf_folder, out)
    assert done.status == 0, done.err
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model_to_plugtrain.mdl", "config_to_plugtrain.yaml", running.name]
    )
    # an export killed while staging: its hidden folder goes with the next export's start
    staged = tmp_path / "export" / f".model_to_plugtrain_to_hf.partial-{dead}-0123abcd"
    staged.mkdir(parents=True)
    (staged / "shard-00001.tmp").write_bytes(b"x")
    assert _to_hf(*converted, tmp_path / "export").status == 0
    assert not staged.exists()


def test_x11_a_fit_removes_the_checkpoint_list_temporaries_a_killed_fit_left(
    tmp_path: Path,
) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    stale = model_dir / "..plugtrain-checkpoints.json.1a2b3c4d"
    stale.write_text('{"directory": ')
    notes = model_dir / "..plugtrain-checkpoints.json.notes"
    notes.write_text("mine")
    small_trainer(model_dir, max_steps=2, checkpoint_steps=2).fit(small_data())
    assert not stale.exists()
    assert notes.exists()
    assert (model_dir / ".plugtrain-checkpoints.json").is_file()


@pytest.mark.slow
def test_x11_a_real_kill_during_conversion_then_the_same_command(tmp_path: Path) -> None:
    import transformers

    big = {**LLAMA, "vocab_size": 16000, "hidden_size": 512, "intermediate_size": 1024,
           "num_hidden_layers": 2, "num_attention_heads": 8}  # fmt: skip
    model = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **big)
    folder = save_hf(model, tmp_path / "llama")  # about 80 MB of float32 weights
    del model
    out = tmp_path / "out"
    command = (
        "checkpoint", "convert", str(folder), "--config", str(folder / "config.json"),
        "--src-fmt", "hf", "--tgt-fmt", "plugtrain", "--output-dir", str(out),
    )  # fmt: skip
    process = start_plugtrain(*command)
    wait_until(lambda: out.is_dir() and any(p.name.startswith(".") for p in out.iterdir()), process)
    os.killpg(process.pid, 9)
    finish_process(process)
    assert [p.name for p in out.iterdir() if p.name.startswith(".")]  # the kill left partials
    done = run_cli(*command)
    assert done.status == 0, done.err
    assert sorted(p.name for p in out.iterdir()) == [
        "config_to_plugtrain.yaml",
        "model_to_plugtrain.mdl",
    ]
