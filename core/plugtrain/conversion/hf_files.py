"""Hugging Face checkpoint files: found in a folder, read one shard at a time, written sharded.

Inputs: a folder, ``model.safetensors``, ``pytorch_model.bin`` or an ``*.index.json`` of shards.
Safetensors are read one tensor at a time (memory-mapped); ``.bin`` shards one shard at a time.
Output: ``model-0000i-of-0000N.safetensors`` (or ``pytorch_model-...bin``) shards and their
index, written into a hidden folder (``.<name>.partial-<pid>-<hex>``, one per conversion) that is
renamed into place when complete; a folder another conversion renamed there first is kept.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from plugtrain.conversion.declaration import ConversionError
from plugtrain.conversion.files import HF_WEIGHT_FILES, hf_weight_files, is_hf_checkpoint
from plugtrain.conversion.writing import write_failure

__all__ = [
    "HF_WEIGHT_FILES",
    "ShardedWriter",
    "hf_weight_files",
    "is_hf_checkpoint",
    "iter_file_tensors",
    "iter_hf_tensors",
    "parse_size",
    "remove_stale_staging",
]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|KIB|MB|MIB|GB|GIB|TB|TIB)?\s*$", re.IGNORECASE)
_UNITS = {
    "B": 1, "KB": 10**3, "KIB": 2**10, "MB": 10**6, "MIB": 2**20,
    "GB": 10**9, "GIB": 2**30, "TB": 10**12, "TIB": 2**40,
}  # fmt: skip


def parse_size(text: str | int) -> int:
    """Bytes in ``"10GB"``, ``"500MiB"`` or a plain number of bytes."""
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        message = f"not a size: {text!r} (write a number with a unit: 10GB, 500MiB, 2000000)"
        raise ConversionError(message)
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "B").upper()])


def iter_hf_tensors(path: str | os.PathLike[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of the checkpoint at ``path``, one shard in memory at a time."""
    yield from iter_file_tensors(hf_weight_files(path))


def iter_file_tensors(files: Iterable[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of these weight files, one shard in memory at a time."""
    for file in files:
        if file.suffix == ".safetensors":
            yield from _safetensors_tensors(file)
        else:
            yield from _torch_tensors(file)


def _safetensors_tensors(file: Path) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                yield name, handle.get_tensor(name)
    except SafetensorError as exc:
        raise ConversionError(f"{file}: not a readable safetensors file: {exc}") from exc


def _torch_tensors(file: Path) -> Iterator[tuple[str, torch.Tensor]]:
    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:
        message = f"{file}: not a readable PyTorch weights file: {type(exc).__name__}: {exc}"
        raise ConversionError(message) from exc
    if not isinstance(state, dict):
        raise ConversionError(f"{file}: holds a {type(state).__name__}, not a state dict")
    for name, tensor in state.items():
        if isinstance(tensor, torch.Tensor):
            yield name, tensor
    del state


class ShardedWriter:
    """Writes tensors into shards of at most ``shard_bytes`` and their index (see the module).

    Use as a context manager: the folder appears only when :meth:`close` completes.
    """

    def __init__(
        self, directory: str | os.PathLike[str], shard_bytes: int, safetensors: bool
    ) -> None:
        self.directory = Path(directory)
        if self.directory.exists():
            raise ConversionError(f"{self.directory}: already exists (choose a new output folder)")
        self.shard_bytes = max(int(shard_bytes), 1)
        self.safetensors = safetensors
        remove_stale_staging(self.directory)
        token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.staging = self.directory.with_name(f".{self.directory.name}.partial-{token}")
        try:
            self.staging.mkdir(parents=True)
        except OSError as exc:
            raise write_failure(self.directory.parent, exc) from exc
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self._shards: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        try:
            if error is None:
                self.close()
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Queue one tensor; a full shard is written out first."""
        size = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + size > self.shard_bytes:
            self._flush()
        self._pending[name] = tensor.contiguous()
        self._pending_bytes += size
        self.total_bytes += size

    def staged(self, name: str) -> Path:
        """Where an extra file (config.json, tokenizer files) is written before the rename."""
        return self.staging / name

    def _flush(self) -> None:
        if not self._pending:
            return
        number = len(self._shards) + 1
        file = self.staging / f"shard-{number:05d}.tmp"
        try:
            if self.safetensors:
                from safetensors.torch import save_file

                save_file(_unaliased(self._pending), str(file), metadata={"format": "pt"})
            else:
                torch.save(self._pending, file)
        except Exception as exc:  # OSError, torch's RuntimeError, SafetensorError
            raise write_failure(self.directory, exc) from exc
        self._shards.append((file, list(self._pending)))
        self._pending, self._pending_bytes = {}, 0

    def close(self) -> Path:
        """Write the last shard, name the shards, write the index, and move the folder in place."""
        self._flush()
        try:
            return self._finish()
        except OSError as exc:
            raise write_failure(self.directory, exc) from exc

    def _finish(self) -> Path:
        count = len(self._shards)
        stem, suffix = ("model", "safetensors") if self.safetensors else ("pytorch_model", "bin")
        weight_map: dict[str, str] = {}
        for number, (file, names) in enumerate(self._shards, start=1):
            final = f"{stem}-{number:05d}-of-{count:05d}.{suffix}"
            file.rename(self.staging / final)
            weight_map.update(dict.fromkeys(names, final))
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        index_name = f"{stem}.{suffix}.index.json"
        (self.staging / index_name).write_text(json.dumps(index, indent=2) + "\n", "utf-8")
        for file in self.staging.iterdir():
            with file.open("rb") as handle:
                os.fsync(handle.fileno())
        if self.directory.exists():
            raise _lost_race(self.directory)
        try:
            os.rename(self.staging, self.directory)
        except OSError as exc:
            if self.directory.exists():
                raise _lost_race(self.directory) from exc
            raise
        return self.directory


def _lost_race(directory: Path) -> ConversionError:
    message = (
        f"{directory}: another conversion wrote this folder while this one ran; it is kept "
        "and this conversion's output is removed (choose a new output folder)"
    )
    return ConversionError(message)


def remove_stale_staging(directory: Path) -> list[Path]:
    """Delete the staging folders of ``directory`` that ended processes left (a kill -9).

    A staging folder is ``.<name>.partial-<pid>-<hex>``; one whose process still runs is kept.
    """
    pattern = re.compile(re.escape(f".{directory.name}.partial-") + r"(\d+)-[0-9a-f]{8}\Z")
    removed: list[Path] = []
    parent = directory.parent
    if not parent.is_dir():
        return removed
    for entry in parent.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_dir() and not _running(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unaliased(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Safetensors refuses tensors that share memory: give each its own."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        pointer = tensor.untyped_storage().data_ptr() if tensor.numel() else 0
        out[name] = tensor.clone() if pointer and pointer in seen else tensor
        seen.add(pointer)
    return out
