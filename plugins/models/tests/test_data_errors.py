"""Bad data and bad data sections: errors that name the file, or the line of the run file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

import plugtrain
from plugtrain.errors import TrainingError
from plugtrain.testing import run_plugtrain, write_run_file


def _write(path: Path, data: np.ndarray, *, count: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data)
        if count:
            file.attrs["n_examples"] = data.shape[0]


def _loader(name: str, folder: Path, **arguments: object) -> object:
    return plugtrain.resolve("dataloader", name)(data_dir=str(folder), **arguments)


def test_only_the_iterable_processor_needs_n_examples(tmp_path: Path) -> None:
    _write(tmp_path / "a.h5", np.ones((2, 3, 4), dtype=np.int32), count=False)
    with pytest.raises(TrainingError, match=r"a\.h5: the file has no 'n_examples' attribute"):
        _loader("GptHDF5DataProcessor", tmp_path, batch_size=1, shuffle=False)
    assert len(list(_loader("GptHDF5MapDataProcessor", tmp_path, batch_size=1))) == 2  # type: ignore[call-overload]


def test_files_of_different_shapes_are_named_both(tmp_path: Path) -> None:
    _write(tmp_path / "a.h5", np.ones((2, 3, 4), dtype=np.int32))
    _write(tmp_path / "b.h5", np.ones((2, 3, 8), dtype=np.int32))
    for name in ("GptHDF5MapDataProcessor", "GptHDF5DataProcessor"):
        with pytest.raises(TrainingError) as raised:
            _loader(name, tmp_path, batch_size=1, shuffle=False)
        assert str(tmp_path / "a.h5") in str(raised.value)
        assert str(tmp_path / "b.h5") in str(raised.value)


def test_a_corpus_needs_max_sequence_length_and_samples_refuse_it(tmp_path: Path) -> None:
    _write(tmp_path / "corpus" / "c.h5", np.arange(20, dtype=np.int32))
    with pytest.raises(TrainingError, match="needs max_sequence_length"):
        _loader("GptHDF5MapDataProcessor", tmp_path / "corpus", batch_size=1)
    _write(tmp_path / "samples" / "s.h5", np.ones((2, 3, 4), dtype=np.int32))
    with pytest.raises(TrainingError, match="max_sequence_length must stay null"):
        _loader(
            "GptHDF5MapDataProcessor", tmp_path / "samples", batch_size=1, max_sequence_length=4
        )


def test_iterable_features_come_from_data_params(tmp_path: Path) -> None:
    _write(tmp_path / "a.h5", np.arange(24, dtype=np.int32).reshape(2, 3, 4))
    features = ["input_ids", "loss_mask", "targets"]
    (tmp_path / "data_params.json").write_text(json.dumps({"features": features}))
    batch = next(iter(_loader("GptHDF5DataProcessor", tmp_path, batch_size=2, shuffle=False)))  # type: ignore[call-overload]
    assert list(batch) == features
    assert batch["targets"].tolist() == [[8, 9, 10, 11], [20, 21, 22, 23]]
    # Model Zoo's precedence: data_params.json wins for one folder written as a string ...
    written = ["a", "b", "c"]
    loader = _loader("GptHDF5DataProcessor", tmp_path, batch_size=2, shuffle=False)
    assert list(next(iter(loader))) == features  # type: ignore[call-overload]
    named = plugtrain.resolve("dataloader", "GptHDF5DataProcessor")(
        data_dir=str(tmp_path), batch_size=2, shuffle=False, features_list=written
    )
    assert list(next(iter(named))) == features
    # ... but not for a list of folders.
    listed = plugtrain.resolve("dataloader", "GptHDF5DataProcessor")(
        data_dir=[str(tmp_path)], batch_size=2, shuffle=False, features_list=written
    )
    assert list(next(iter(listed))) == written


RUN = """\
trainer:
  init:
    model:
      MLP: {{in_features: 4, out_features: 2}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 1}}
  fit:
    train_dataloader:
      data_processor: GptHDF5MapDataProcessor
      batch_size: 2
      shuffle: true
      vocab_size: 50257
      data_dir: {train}
    val_dataloader:
      data_processor: GptHDF5DataProcessor
      data_dir: [{val}]
      batch_size: 2
      {extra}
"""


def _check(tmp_path: Path, **values: str) -> tuple[int, str]:
    fields = {
        "train": str(tmp_path / "data"),
        "val": str(tmp_path / "data"),
        "extra": "shuffle: false",
    }
    fields.update(values)
    result = run_plugtrain("check", write_run_file(tmp_path, RUN.format(**fields)))
    return result.status, result.out + result.err


def test_model_zoo_spelling_checks_with_a_warning_for_deprecated_keys(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    status, output = _check(tmp_path)
    assert status == 0, output
    run = tmp_path / "run.yaml"
    assert f"{run}:13:7: trainer.fit.train_dataloader.GptHDF5MapDataProcessor.vocab_size" in output


def test_a_missing_data_dir_is_a_check_error_at_its_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    status, output = _check(tmp_path, train=str(missing), val=f"{tmp_path}, {missing}")
    assert status == 2
    run = tmp_path / "run.yaml"
    prefix = f"{run}:14:7: trainer.fit.train_dataloader.GptHDF5MapDataProcessor.data_dir"
    assert f"{prefix}: Path {missing} does not exist." in output
    prefix = f"{run}:17:7: trainer.fit.val_dataloader.GptHDF5DataProcessor.data_dir"
    assert f"{prefix}: Path {missing} does not exist." in output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("mixed_precision: true", "unknown argument 'mixed_precision'"),
        ("bogus: 1", "unknown argument 'bogus'"),
        ("", "missing required argument 'shuffle'"),
    ],
)
def test_bad_keys_are_errors_at_their_line(tmp_path: Path, extra: str, message: str) -> None:
    (tmp_path / "data").mkdir()
    status, output = _check(tmp_path, extra=f"shuffle: false\n      {extra}" if extra else "")
    assert status == 2
    assert message in output
    if extra:
        assert f"{tmp_path / 'run.yaml'}:20:7:" in output


def test_map_processor_cross_checks(tmp_path: Path) -> None:
    from plugtrain_models.data.schemas import MapProcessorArgs

    def problems(**arguments: object) -> list[str]:
        defaults = {
            "batch_size": 1, "data_dir": str(tmp_path), "mixture": None, "dataset_map_fn": None,
            "pad_last": False, "drop_last": True, "data_subset": None, "data_transforms": None,
            "use_vsl": False,
        }  # fmt: skip
        found = MapProcessorArgs.cross_check({**defaults, **arguments})
        return [p if isinstance(p, str) else p.message for p in found]

    assert problems() == []
    assert "mixture is not supported yet: give data_dir" in problems(mixture=[{}], data_dir=None)
    assert problems(pad_last=True) == []  # no effect with drop_last, as in Model Zoo
    assert problems(data_subset="0.5-0.2") == [
        "data_subset part '0.5-0.2' needs 0 <= START <= END <= 1"
    ]
    assert problems(data_subset="0.0-0.5,0.4-0.6") == [
        "data_subset parts must increase without overlap, got '0.0-0.5,0.4-0.6'"
    ]
    assert problems(data_subset="0.0-0.0,0.5-1.0") == []
    assert problems(data_transforms=[{"name": "add_pose_shift"}]) == [
        "data_transforms[0]: transform 'add_pose_shift' is not supported "
        "(supported: add_sink_tokens)"
    ]
    assert problems(data_transforms=[{"name": "add_sink_tokens", "sink_id": 1}])[0].startswith(
        "data_transforms[0]: unknown key 'sink_id' of add_sink_tokens"
    )


def test_check_and_listing_import_neither_torch_nor_h5py(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(
        RUN.format(train=tmp_path / "data", val=tmp_path / "data", extra="shuffle: false")
    )
    script = textwrap.dedent(
        f"""
        import sys
        from plugtrain.cli import main
        assert main(["check", {str(run)!r}]) == 0
        assert main(["show", "GptHDF5DataProcessor"]) == 0
        assert main(["list", "dataloader"]) == 0
        heavy = sorted({{"torch", "h5py", "numpy"}} & set(sys.modules))
        print("HEAVY", heavy)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout


def test_sinks_beyond_the_sequence_and_sinks_with_vsl_are_errors(tmp_path: Path) -> None:
    from plugtrain_models.data.schemas import MapProcessorArgs

    _write(tmp_path / "a.h5", np.ones((2, 3, 4), dtype=np.int32))
    transform = {"name": "add_sink_tokens", "sink_token_start_pos": 5}
    loader = _loader("GptHDF5MapDataProcessor", tmp_path, batch_size=2, data_transforms=[transform])
    with pytest.raises(TrainingError, match="sink_token_start_pos 5 is beyond the sequence"):
        next(iter(loader))  # type: ignore[call-overload]
    arguments = {
        "batch_size": 1, "data_dir": str(tmp_path), "mixture": None, "dataset_map_fn": None,
        "pad_last": False, "drop_last": True, "data_subset": None, "use_vsl": True,
        "data_transforms": [{"name": "add_sink_tokens"}],
    }  # fmt: skip
    found = [p.message for p in MapProcessorArgs.cross_check(arguments)]  # type: ignore[union-attr]
    assert found == ["data_transforms do not take use_vsl"]
