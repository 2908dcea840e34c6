"""The pieces behind a fast DCP save: O_DIRECT files, cached staging, the finite check, the split.

In one process; the two-process saves and resumes that use them are in
tests/train/distributed/test_sharded.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh

from plugtrain.train.checkpointing.state.fit_check import first_non_finite
from plugtrain.train.checkpointing.storage import direct_io
from plugtrain.train.checkpointing.storage.dcp import join_state, single_process_quiet, split_state
from plugtrain.train.checkpointing.storage.direct_io import (
    BLOCK,
    CHUNK,
    DirectFile,
    DirectFileSystemWriter,
)
from plugtrain.train.checkpointing.storage.staging import CachedStager

SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, CHUNK - 1, CHUNK, CHUNK + 5, 2 * CHUNK + BLOCK + 3]


def _write_in_pieces(stream, data: bytes) -> None:
    start = 0
    for piece in (1, 3000, CHUNK // 2, 10**10):
        stream.write(data[start : start + piece])
        start += piece
        if start >= len(data):
            return


@pytest.mark.parametrize("size", SIZES)
def test_a_direct_file_holds_exactly_the_bytes_written(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    stream = DirectFile(tmp_path / "f")
    _write_in_pieces(stream, data)
    assert stream.tell() == size
    stream.close()
    stream.close()  # twice is fine (DCP closes, then its context manager)
    assert (tmp_path / "f").read_bytes() == data


def test_a_direct_file_takes_any_buffer_and_torch_save_reads_back(tmp_path: Path) -> None:
    import array

    stream = DirectFile(tmp_path / "f")
    stream.write(array.array("i", [1, 2, 3]))  # items wider than a byte
    stream.write(memoryview(b"xy"))
    stream.close()
    assert (tmp_path / "f").read_bytes() == array.array("i", [1, 2, 3]).tobytes() + b"xy"
    tensor = torch.randn(1000, 333, generator=torch.Generator().manual_seed(0))
    stream = DirectFile(tmp_path / "t")
    torch.save(tensor, stream)
    stream.close()
    assert torch.equal(torch.load(tmp_path / "t", weights_only=True), tensor)


def test_simulated_einval_on_write_continues_buffered(tmp_path: Path, monkeypatch) -> None:
    """A file system that opens with O_DIRECT but refuses the writes (simulated: os.write)."""
    real_write = os.write
    refused = []

    def refusing_write(fd: int, data) -> int:
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & direct_io.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(direct_io.os, "write", refusing_write)
    data = os.urandom(CHUNK + 123)
    stream = DirectFile(tmp_path / "f")
    _write_in_pieces(stream, data)
    stream.close()
    assert refused == [CHUNK]
    assert (tmp_path / "f").read_bytes() == data


def test_without_o_direct_the_file_system_opens_plain_files(tmp_path: Path, monkeypatch) -> None:
    system = direct_io.DirectFileSystem()
    with system.create_stream(tmp_path / "a", "wb") as stream:
        assert isinstance(stream, DirectFile)
        stream.write(b"abc")
    monkeypatch.setattr(direct_io, "O_DIRECT", 0)
    with system.create_stream(tmp_path / "b", "wb") as stream:
        assert not isinstance(stream, DirectFile)
        stream.write(b"abc")
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes() == b"abc"


def test_a_failed_write_closes_the_file_and_raises(tmp_path: Path) -> None:
    system = direct_io.DirectFileSystem()
    opened = []

    def write_and_fail() -> None:
        with system.create_stream(tmp_path / "a", "wb") as stream:
            opened.append(stream)
            stream.write(b"abc")
            raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        write_and_fail()
    assert opened[0].closed


def test_dcp_written_with_o_direct_loads_with_dcps_own_reader(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(1)
    state = {
        "model": {f"w{i}": torch.randn(37, 3 * i + 1, generator=generator) for i in range(9)},
        "extra": {"count": torch.tensor(3), "halves": torch.ones(5, dtype=torch.float16)},
    }
    plain = tmp_path / "plain"
    with single_process_quiet():
        dcp.save(state, storage_writer=DirectFileSystemWriter(tmp_path / "c"), no_dist=True)
        dcp.save(state, storage_writer=dcp.FileSystemWriter(plain), no_dist=True)
    for folder in (tmp_path / "c", plain):
        loaded = {
            "model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
            "extra": {k: torch.zeros_like(v) for k, v in state["extra"].items()},
        }
        with single_process_quiet():
            dcp.load(loaded, checkpoint_id=str(folder), no_dist=True)
        assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
        assert all(torch.equal(loaded["extra"][k], v) for k, v in state["extra"].items())
    sizes = [(p.name, p.stat().st_size) for p in sorted((tmp_path / "c").glob("*.distcp"))]
    assert sizes == [(p.name, p.stat().st_size) for p in sorted(plain.glob("*.distcp"))]


# -- the cached stager ---------------------------------------------------------------------


def test_staging_copies_into_the_same_buffers_until_the_layout_changes() -> None:
    weight, step = torch.randn(4, 5), torch.tensor(7.0)
    stager = CachedStager()
    first = stager.stage({"model": {"w": weight}, "opt": {"0": {"step": step}}, "n": [1, {"a": 2}]})
    assert torch.equal(first["model"]["w"], weight)
    assert first["model"]["w"].data_ptr() != weight.data_ptr()
    assert first["n"] == [1, {"a": 2}]
    weight.add_(1)  # training goes on: the staged copy does not change
    assert not torch.equal(first["model"]["w"], weight)
    state = {"model": {"w": weight}, "opt": {"0": {"step": step}}, "n": [1, {"a": 2}]}
    second = stager.stage(state)
    assert torch.equal(second["model"]["w"], weight)
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr()
    assert stager.rebuilt == 1
    stager.stage({"model": {"w": weight.double()}, "opt": {"0": {"step": step}}})
    assert stager.rebuilt == 2  # another dtype, other buffers
    stager.close()


def test_staged_dtensors_keep_the_mesh_placements_and_shape(one_process_group) -> None:
    mesh = init_device_mesh("cpu", (1,))
    whole = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))
    sharded = distribute_tensor(whole, mesh, [Shard(0)])
    stager = CachedStager()
    staged = stager.stage({"w": sharded})["w"]
    assert isinstance(staged, DTensor)
    assert staged.placements == sharded.placements
    assert staged.shape == sharded.shape
    assert torch.equal(staged.to_local(), sharded.to_local())
    assert staged.to_local().data_ptr() != sharded.to_local().data_ptr()
    again = stager.stage({"w": sharded})["w"]
    assert again.to_local().data_ptr() == staged.to_local().data_ptr()
    assert stager.rebuilt == 1


# -- the finite check and the split -----------------------------------------------------------


def test_the_finite_check_is_exact_when_a_sum_overflows() -> None:
    huge = torch.full((100,), 3e38)  # finite, but its sum overflows to infinity
    half = torch.full((100,), 60000.0, dtype=torch.float16)
    with_nan, with_inf = torch.zeros(10), torch.zeros(10)
    with_nan[3], with_inf[7] = float("nan"), -float("inf")
    tensors = {"huge": huge, "half": half, "empty": torch.zeros(0), "ids": torch.arange(3)}
    assert first_non_finite(tensors, tensors) is None
    assert first_non_finite({**tensors, "n": with_nan}, [*tensors, "n"]) == "n"
    assert first_non_finite({**tensors, "i": with_inf}, [*tensors, "i"]) == "i"


def test_scalars_of_the_optimizer_state_go_to_trainer_pt() -> None:
    state = {
        "model": {"w": torch.ones(2)},
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2), "lr": 0.1}},
            "param_groups": [{"params": [0]}],
        },
        "global_step": 3,
    }
    tensors, rest = split_state(state)
    assert set(tensors["optimizer_state"]["0"]) == {"exp_avg"}
    assert set(rest["optimizer"]["state"][0]) == {"step", "lr"}
    joined = join_state(tensors, rest)
    assert joined["optimizer"]["state"][0].keys() == state["optimizer"]["state"][0].keys()
    assert joined["model"] is state["model"]


# -- a background save's first verification ------------------------------------------------


def _background_save(tmp_path: Path):
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer

    template = {"model": {"w": torch.zeros(5000)}, "optimizer": None}
    checkpointer = DCPCheckpointer(
        tmp_path, "checkpoint_{step}", lambda _: template, async_save=True
    )
    state = {"model": {"w": torch.arange(5000.0)}, "global_step": 3, "optimizer": None}
    path = checkpointer.save(3, state)
    checkpointer.verify(path, state, {"model": None})  # does not wait for the write
    assert checkpointer._pending is not None
    assert checkpointer.stager.rebuilt == 1
    checkpointer._pending[0].result()  # the write is done; not yet checked nor in place
    return checkpointer, path


def test_a_background_saves_folder_is_checked_when_it_is_put_in_place(tmp_path: Path) -> None:
    checkpointer, path = _background_save(tmp_path)
    assert not path.exists()
    checkpointer.wait()
    assert torch.equal(checkpointer.load(path)["model"]["w"], torch.arange(5000.0))


def test_a_background_save_damaged_before_its_check_is_not_put_in_place(tmp_path: Path) -> None:
    from plugtrain.errors import CorruptCheckpointError

    checkpointer, path = _background_save(tmp_path)
    partial = tmp_path / f".{path.name}.partial"
    (shard,) = partial.glob("*.distcp")
    with shard.open("r+b") as damaged:
        damaged.truncate(100)
    with pytest.raises(CorruptCheckpointError, match=r"__0_0\.distcp is 100 bytes"):
        checkpointer.wait()
    assert not path.exists()
