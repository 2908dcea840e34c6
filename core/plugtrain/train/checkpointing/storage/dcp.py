"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP): one folder per step.

``checkpoint.format: dcp``. A checkpoint is a folder named after ``checkpoint_name``:

- DCP's ``.metadata`` and one ``__R_0.distcp`` shard file per process hold the tensors of the
  model and of the optimizer state, each process writing its own shards (under FSDP2 nothing is
  gathered); loading reshards, so a checkpoint of 2 processes loads on 1 or 3;
- ``trainer.pt`` (a single-file checkpoint, written by the writing process) holds the rest:
  step, schedulers, grad scaler, RNG, data position, callbacks, sparsity, the optimizer's
  param groups, its per-parameter scalars (step counts) and metadata; it is read with
  ``weights_only=True``.

Saving is atomic: everything is written into the hidden folder ``.NAME.partial`` and renamed
once complete. With ``async_save`` the state is copied (into buffers kept between saves,
:mod:`.staging`) and DCP writes the copy in a thread; the next save (and the
end of the run, and any load) waits for it first. Shard files are written with ``O_DIRECT``
(:mod:`.direct_io`), which takes a fraction of the CPU a buffered write takes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from plugtrain.config.plan import plain
from plugtrain.errors import CheckpointError, CorruptCheckpointError
from plugtrain.train.checkpointing.state import verify_first_checkpoint
from plugtrain.train.checkpointing.storage import archive
from plugtrain.train.checkpointing.storage.checkpointer import Checkpointer
from plugtrain.train.checkpointing.storage.direct_io import DirectFileSystemWriter
from plugtrain.train.checkpointing.storage.staging import CachedStager

__all__ = [
    "REST_FILE",
    "DCPCheckpointer",
    "HoldsState",
    "described",
    "join_state",
    "single_process_quiet",
    "split_state",
    "state_template",
    "verify_folder",
]

log = logging.getLogger("plugtrain")

REST_FILE = "trainer.pt"
"""The file of a DCP checkpoint folder that holds everything but the tensors of the model and
the optimizer state."""

TENSORS = ("model", "optimizer_state")
"""The top-level keys of the DCP part: the model's state dict, the optimizer's tensor state."""


SINGLE_PROCESS_WARNING = "torch.distributed is disabled"


@contextlib.contextmanager
def single_process_quiet() -> Iterator[None]:
    """No "torch.distributed is disabled ... assuming ... a single process" warning: intended."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SINGLE_PROCESS_WARNING)
        yield


def split_state(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, rest)``: what DCP writes and what ``trainer.pt`` holds."""
    rest = {k: v for k, v in state.items() if k != "model"}
    tensors: dict[str, Any] = {"model": state["model"]}
    optimizer = state.get("optimizer")
    if optimizer is not None:
        tensor_state: dict[str, dict[str, Any]] = {}
        other_state: dict[Any, dict[str, Any]] = {}
        for index, entries in optimizer["state"].items():
            tensor_state[str(index)] = {k: v for k, v in entries.items() if _is_shard_data(v)}
            other_state[index] = {k: v for k, v in entries.items() if not _is_shard_data(v)}
        tensors["optimizer_state"] = tensor_state
        rest["optimizer"] = {**optimizer, "state": other_state}
    return tensors, rest


def _is_shard_data(value: Any) -> bool:
    """Whether an optimizer state entry goes to DCP: tensors, except plain scalars.

    A step count is the same on every process and would cost DCP a record of its own;
    ``trainer.pt`` holds it.
    """
    if isinstance(value, DTensor):
        return True
    return isinstance(value, torch.Tensor) and value.dim() > 0


def join_state(tensors: Mapping[str, Any], rest: Mapping[str, Any]) -> dict[str, Any]:
    """The state :func:`split_state` split, whole again."""
    state = {**rest, "model": tensors["model"]}
    optimizer = rest.get("optimizer")
    if optimizer is not None:
        loaded = tensors.get("optimizer_state", {})
        state["optimizer"] = {
            **optimizer,
            "state": {
                index: {**entries, **loaded.get(str(index), {})}
                for index, entries in optimizer["state"].items()
            },
        }
    return state


def described(error: BaseException) -> str:
    """``Type: message`` of ``error``, or of each process's failure in it.

    DCP's ``CheckpointException`` derives from ``BaseException`` (an ``except Exception`` lets
    it through) and prints whole tracebacks; it is described by its failures instead.
    """
    if isinstance(error, CheckpointException):
        failures = sorted(error.failures.items())
        return "; ".join(f"rank {rank}: {described(failure)}" for rank, (failure, _) in failures)
    return f"{type(error).__name__}: {error}"


def verify_folder(path: Path) -> None:
    """Check a DCP checkpoint folder: metadata readable, every shard file there and long enough.

    :raises CorruptCheckpointError: naming what is missing or short.
    """
    if not (path / ".metadata").is_file() or not (path / REST_FILE).is_file():
        missing = ".metadata" if not (path / ".metadata").is_file() else REST_FILE
        raise CorruptCheckpointError(f"{path}: not a complete DCP checkpoint ({missing} missing)")
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except Exception as exc:
        message = f"{path}: unreadable DCP metadata ({type(exc).__name__}: {exc})"
        raise CorruptCheckpointError(message) from exc
    ends: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = int(info.offset) + int(info.length)
        ends[info.relative_path] = max(ends.get(info.relative_path, 0), end)
    for name, end in sorted(ends.items()):
        shard = path / name
        size = shard.stat().st_size if shard.is_file() else -1
        if size < end:
            what = "missing" if size < 0 else f"{size} bytes, {end} expected"
            raise CorruptCheckpointError(f"{path}: shard file {name} is {what} (truncated?)")
    archive.verify_archive(path / REST_FILE)


def _planner() -> DefaultSavePlanner:
    """DCP's planner, reusing the previous save's plan when no process's part changed.

    That spares exchanging the plans between processes and checking them again.
    """
    return DefaultSavePlanner(enable_plan_caching=True)


class HoldsState(Protocol):
    """What :func:`state_template` reads of the trainer: the model and the optimizer."""

    @property
    def unwrapped_model(self) -> torch.nn.Module:
        """The module that holds the weights."""

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer (``None``: evaluation only)."""


def state_template(trainer: HoldsState, with_optimizer_state: bool) -> dict[str, Any]:
    """Copies of ``trainer``'s model and optimizer state dicts, for DCP to load into.

    Copies, so that loading changes nothing before the Trainer applies the parts it keeps
    (``LoadCheckpointStates`` may leave the model or the optimizer as they are); under FSDP2
    they are copies of this process's shards only.

    :param with_optimizer_state: create the optimizer's state first when it has none yet (a
        step with zero gradients and a zero learning rate, torch's own recipe).
    """
    from torch.distributed.checkpoint.state_dict import _init_optim_state

    optimizer = trainer.optimizer
    if optimizer is not None and with_optimizer_state:
        _init_optim_state(optimizer)
    optimizer_state = optimizer.state_dict() if optimizer is not None else None
    if optimizer_state is not None:
        optimizer_state = {**optimizer_state, "state": _copied(optimizer_state["state"])}
    return {"model": _copied(trainer.unwrapped_model.state_dict()), "optimizer": optimizer_state}


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {key: _copied(item) for key, item in value.items()}
    return value


class DCPCheckpointer(Checkpointer):
    """One DCP folder per step; every process saves and loads its own shards.

    :param directory: where the checkpoint folders are written and found.
    :param name: the folder name pattern, with ``{step}``.
    :param template: ``template(with_optimizer_state)`` returns the current ``{"model": ...,
        "optimizer": ...}`` state dicts (DTensors under FSDP2), which loading fills in place
        (DCP loads into existing tensors); with ``True`` the optimizer's state must exist.
    :param is_writer: whether this process writes ``trainer.pt`` and renames the folder.
    :param async_save: write in the background (``checkpoint.async_save``).
    :param owner: the run's ``model_dir`` (see :meth:`Checkpointer.claim`).
    """

    collective = True
    sharded = True

    def __init__(
        self,
        directory: Path,
        name: str,
        template: Callable[[bool], dict[str, Any]],
        *,
        is_writer: bool = True,
        async_save: bool = False,
        owner: Path | None = None,
    ) -> None:
        super().__init__(directory, name, owner)
        self.template = template
        self.is_writer = is_writer
        self.async_save = async_save
        self._pending: tuple[Future[Any], Path, Path] | None = None
        self._async_group: Any = None
        self._check_folder = False
        self.stager = CachedStager()
        """Copies the state for background saves into buffers kept between them."""

    # -- saving ----------------------------------------------------------------------------

    def _partial(self, final: Path) -> Path:
        return final.parent / f".{final.name}.partial"

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Write the checkpoint of ``step`` (every process, each its shards); returns its path."""
        self.wait()
        final = self.path(step)
        partial = self._partial(final)
        tensors, rest = split_state(state)
        distributed = dist.is_available() and dist.is_initialized()
        if self.is_writer:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            archive.save_checkpoint(partial / REST_FILE, plain(rest))
        if distributed:
            dist.barrier()  # the folder exists before anyone writes into it
        try:
            if self.async_save:
                if not distributed:  # DCP warns in its thread, after any `with` has ended
                    warnings.filterwarnings("ignore", message=SINGLE_PROCESS_WARNING)
                with single_process_quiet():
                    future = dcp_async_save(
                        tensors,
                        storage_writer=DirectFileSystemWriter(partial),
                        planner=_planner(),
                        process_group=self._group(),
                        async_stager=self.stager,
                        no_dist=not distributed,
                    )
                self._pending = (future, partial, final)  # type: ignore[assignment]
                return final
            with single_process_quiet():
                dcp_save(
                    tensors,
                    storage_writer=DirectFileSystemWriter(partial),
                    planner=_planner(),
                    no_dist=not distributed,
                )
        except (OSError, RuntimeError, CheckpointException) as exc:
            raise CheckpointError(f"{final}: cannot be written ({described(exc)})") from exc
        self._finish(partial, final)
        return final

    def _group(self) -> Any:
        """A process group of its own for background saves (gloo), apart from training's."""
        if not (dist.is_available() and dist.is_initialized()):
            return None
        if self._async_group is None:
            self._async_group = dist.new_group(backend="gloo")
        return self._async_group

    def _finish(self, partial: Path, final: Path) -> None:
        """The writer renames the complete folder into place (DCP's last step waits for all)."""
        if not self.is_writer:
            return
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
        archive._fsync_directory(final.parent)

    def wait(self) -> None:
        """Wait for a background save to finish and put it in place (nothing when none runs)."""
        if self._pending is None:
            return
        future, partial, final = self._pending
        check_folder, self._check_folder = self._check_folder, False  # this save's, not the next
        self._pending = None
        try:
            future.result()
        except (Exception, CheckpointException) as exc:
            message = f"{final}: the background save failed ({described(exc)})"
            raise CheckpointError(message) from exc
        if check_folder:
            verify_folder(partial)
        self._finish(partial, final)

    def verify(self, path: Path, state: Mapping[str, Any], owners: Mapping[str, Any]) -> None:
        """Check that ``trainer.pt`` loads, and the folder once its write is complete.

        A background save is not waited for: its ``trainer.pt`` (written before the call
        returned) is checked now, its folder when :meth:`wait` puts it in place.
        """
        if not self.is_writer:
            return
        _, rest = split_state(state)
        if self._pending is not None:
            _, partial, _ = self._pending
            verify_first_checkpoint(partial / REST_FILE, rest, owners)
            self._check_folder = True
            return
        verify_folder(path)
        verify_first_checkpoint(path / REST_FILE, rest, owners)

    # -- loading ---------------------------------------------------------------------------

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The state in the folder at ``path``, its tensors shaped like this run's (resharded)."""
        self.wait()
        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(f"{path}: no such DCP checkpoint folder")
        verify_folder(path)
        rest = self._rest(path)
        template = self.template(rest.get("optimizer") is not None)
        tensors: dict[str, Any] = {"model": template["model"]}
        optimizer = template.get("optimizer")
        stored = FileSystemReader(str(path)).read_metadata().state_dict_metadata
        if optimizer is not None and rest.get("optimizer") is not None:
            tensors["optimizer_state"] = {
                str(index): {
                    key: value
                    for key, value in entries.items()
                    if isinstance(value, torch.Tensor)
                    and f"optimizer_state.{index}.{key}" in stored
                }
                for index, entries in optimizer["state"].items()
            }
        distributed = dist.is_available() and dist.is_initialized()
        try:
            with single_process_quiet():
                dcp_load(tensors, checkpoint_id=str(path), no_dist=not distributed)
        except (Exception, CheckpointException) as exc:
            message = f"{path}: the DCP shards do not load ({described(exc)})"
            raise CorruptCheckpointError(message) from exc
        return join_state(tensors, rest)

    @staticmethod
    def _rest(path: Path) -> dict[str, Any]:
        """``trainer.pt`` read as a single-file checkpoint's parts (without the model)."""
        try:
            state = torch.load(path / REST_FILE, map_location="cpu", weights_only=True)
        except Exception as exc:
            message = f"{path / REST_FILE}: not readable: {type(exc).__name__}: {exc}"
            raise CorruptCheckpointError(message) from exc
        if not isinstance(state, dict) or "global_step" not in state:
            raise CorruptCheckpointError(f"{path / REST_FILE}: no global_step")
        return state

    # -- finding and removing --------------------------------------------------------------

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """The folders named after :attr:`name` in :attr:`directory`, the newest first."""
        self.wait()
        if not self.directory.is_dir():
            return []
        found = []
        for entry in self.directory.iterdir():
            step = self.step_of(entry)
            if step is not None and entry.is_dir():
                found.append((step, entry))
        return sorted(found, key=lambda item: item[0], reverse=True)

    def remove(self, path: Path) -> None:
        """Delete one checkpoint folder (a missing one is fine)."""
        shutil.rmtree(path, ignore_errors=True)

    def clean_up(self) -> list[Path]:
        """Delete the ``.NAME.partial`` folders of interrupted saves."""
        if not self.directory.is_dir():
            return []
        removed = []
        for entry in self.directory.iterdir():
            name = entry.name
            partial = name.startswith(".") and name.endswith(".partial") and entry.is_dir()
            if partial and self.step_of(name[1 : -len(".partial")]) is not None:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed
