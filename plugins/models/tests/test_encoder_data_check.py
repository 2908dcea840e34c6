"""``plugtrain check`` and ``plugtrain list`` know the encoders' data sections, torch-free."""

from __future__ import annotations

from pathlib import Path

import pytest

import plugtrain
from plugtrain.cli import main
from plugtrain.testing import assert_plugin_contract
from plugtrain_models.encoder_data import samples
from plugtrain_models.encoder_data.plugin import DATALOADERS

RUN = """\
trainer:
  init:
    backend: {{backend_type: CPU}}
    model: {{MLP: {{in_features: 4, out_features: 2}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 1}}
  fit:
    train_dataloader:
      data_processor: BertCSVDynamicMaskDataProcessor
      data_dir: ./csv
      vocab_file: {vocab}
      max_sequence_length: 32
      max_predictions_per_seq: 5
      batch_size: 4
{extra}"""


def _check(tmp_path: Path, capsys, vocab: str, extra: str = "") -> tuple[int, str]:
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(vocab=vocab, extra=extra))
    status = main(["check", str(run)])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    samples.write_masked_csv(tmp_path / "csv", 8, 32)
    samples.write_vocab(tmp_path / "root" / "models" / "vocab" / "v.txt")
    return tmp_path


def test_the_ten_processors_are_listed_and_keep_the_plugin_contract(capsys) -> None:
    assert set(DATALOADERS) <= set(plugtrain.names("dataloader"))
    assert len(DATALOADERS) == 10
    assert_plugin_contract("encoder_data")
    assert main(["list", "dataloader"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in DATALOADERS)


def test_modelzoo_root_is_expanded_from_the_environment(folder, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MODELZOO_ROOT", str(folder / "root"))
    status, said = _check(folder, capsys, "$MODELZOO_ROOT/models/vocab/v.txt")
    assert status == 0, said
    monkeypatch.delenv("MODELZOO_ROOT")
    status, said = _check(folder, capsys, "$MODELZOO_ROOT/models/vocab/v.txt")
    assert status != 0
    assert "run.yaml:11:" in said  # the vocab_file line
    assert "$MODELZOO_ROOT/models/vocab/v.txt names $MODELZOO_ROOT" in said
    assert "environment variable MODELZOO_ROOT is not set" in said


def test_a_missing_vocabulary_or_folder_is_reported_at_its_line(folder, capsys) -> None:
    status, said = _check(folder, capsys, "./nowhere/vocab.txt")
    assert status != 0
    assert "run.yaml:11:" in said
    assert "Path ./nowhere/vocab.txt does not exist." in said
    (folder / "run.yaml").write_text(
        RUN.format(vocab="root/models/vocab/v.txt", extra="").replace("./csv", "./gone")
    )
    assert main(["check", str(folder / "run.yaml")]) != 0
    said = capsys.readouterr()
    assert "run.yaml:10:" in said.out + said.err
    assert "Path ./gone does not exist." in said.out + said.err


def test_unknown_keys_are_errors_and_deprecated_ones_warnings(folder, capsys) -> None:
    extra = "      whole_word_masking: false\n      vocab_size: 30522\n"
    status, said = _check(folder, capsys, "root/models/vocab/v.txt", extra)
    assert status == 0, said
    assert "run.yaml:15:" in said  # whole_word_masking
    assert "has no effect: deprecated in Model Zoo" in said
    status, said = _check(folder, capsys, "root/models/vocab/v.txt", extra + "      bogus: 1\n")
    assert status != 0
    assert "run.yaml:17:" in said  # bogus
    assert "unknown argument 'bogus'" in said
    status, said = _check(folder, capsys, "root/models/vocab/v.txt", "      buckets: [16]\n")
    assert status != 0
    assert "buckets (length bucketing) is not supported" in said
