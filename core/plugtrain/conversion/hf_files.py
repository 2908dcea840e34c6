"""Hugging Face checkpoint files: found in a folder, read one shard at a time, written sharded.

Inputs: a folder, ``model.safetensors``, ``pytorch_model.bin`` or an ``*.index.json`` of shards.
Safetensors are read one tensor at a time (into memory of its own); ``.bin`` shards one shard
at a time.
Output: ``model-0000i-of-0000N.safetensors`` (or ``pytorch_model-...bin``) shards and their
index, written into a hidden folder (``.<name>.partial-<pid>-<hex>``, one per conversion) that is
renamed into place when complete; a folder another conversion renamed there first is kept.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from plugtrain.conversion.declaration import ConversionError
from plugtrain.conversion.files import HF_WEIGHT_FILES, hf_weight_files, is_hf_checkpoint
from plugtrain.conversion.writing import process_running, write_failure

__all__ = [
    "HF_WEIGHT_FILES",
    "ReadAs",
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


ReadAs = Callable[[str, torch.dtype], torch.dtype]
"""The type a tensor is to be read as, given its name and its type in the file."""


def iter_file_tensors(
    files: Iterable[Path], read_as: ReadAs | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every ``(name, tensor)`` of these weight files, one shard in memory at a time.

    :param read_as: asked for each tensor of a safetensors file read tensor by tensor (not
        for the others): a floating tensor is converted to the floating type it gives as it
        is read, a piece at a time, so the file's type is never held whole.
    """
    for file in files:
        if file.suffix == ".safetensors":
            yield from _safetensors_tensors(file, read_as)
        else:
            yield from _torch_tensors(file)


_SAFETENSORS_TYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
_LARGEST_HEADER = 100 * 2**20


def _safetensors_tensors(file: Path, read_as: ReadAs | None) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor read from the file into memory of its own, not mapped.

    A mapped file's pages stay resident while it is open, on top of the tensors made from
    them; read, a shard costs only the tensor being read. A file this cannot read (a type it
    does not know, a damaged header) is read by safetensors itself.
    """
    with file.open("rb") as handle:
        entries = _safetensors_entries(handle, file.stat().st_size)
        if entries is None:
            yield from _mapped_tensors(file)
            return
        pieces: dict[torch.dtype, torch.Tensor] = {}  # one per file type, kept between tensors
        for name, (dtype, shape, offset) in entries.items():
            wanted = read_as(name, dtype) if read_as is not None else dtype
            if not (dtype.is_floating_point and wanted.is_floating_point):
                wanted = dtype
            tensor = torch.empty(shape, dtype=wanted)
            if tensor.numel():
                handle.seek(offset)
                piece = None
                if wanted != dtype:
                    piece = pieces.setdefault(dtype, torch.empty(_PIECE, dtype=dtype))
                if not _read_into(handle, tensor.reshape(-1), piece):
                    raise ConversionError(f"{file}: {name} is cut short")
            yield name, tensor


_PIECE = 1 << 22
"""Elements read at a time into a tensor of another type than the file's."""


def _read_into(handle: Any, flat: torch.Tensor, piece: torch.Tensor | None) -> bool:
    """Fill ``flat`` with the file's next values; whether all came.

    Without ``piece`` the values are ``flat``'s own type, read straight into it; with one,
    they are of ``piece``'s type, read a piece at a time and converted into their place.
    """
    if piece is None:
        window: Any = flat.view(torch.uint8).numpy()
        return bool(handle.readinto(window) == window.nbytes)
    for start in range(0, flat.numel(), piece.numel()):
        part = piece[: min(piece.numel(), flat.numel() - start)]
        window = part.view(torch.uint8).numpy()
        if handle.readinto(window) != window.nbytes:
            return False
        flat[start : start + part.numel()].copy_(part)
    return True


def _safetensors_entries(
    handle: Any, size: int
) -> dict[str, tuple[torch.dtype, list[int], int]] | None:
    """Each tensor's type, shape and file offset, in name order; ``None``: not read here."""
    length = int.from_bytes(handle.read(8), "little")
    if not 2 <= length <= min(_LARGEST_HEADER, size - 8):
        return None
    try:
        header = json.loads(handle.read(length))
    except ValueError:
        return None
    header.pop("__metadata__", None)
    entries: dict[str, tuple[torch.dtype, list[int], int]] = {}
    for name in sorted(header):
        entry = header[name]
        kind = entry.get("dtype") if isinstance(entry, dict) else None
        dtype = _SAFETENSORS_TYPES.get(kind) if isinstance(kind, str) else None
        if dtype is None:
            return None
        begin, end = entry["data_offsets"]
        shape = [int(side) for side in entry["shape"]]
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if end - begin != nbytes or 8 + length + end > size:
            return None
        entries[name] = (dtype, shape, 8 + length + begin)
    return entries


def _mapped_tensors(file: Path) -> Iterator[tuple[str, torch.Tensor]]:
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
        if match and entry.is_dir() and not process_running(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _unaliased(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Safetensors refuses tensors that share memory: give each its own."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        pointer = tensor.untyped_storage().data_ptr() if tensor.numel() else 0
        out[name] = tensor.clone() if pointer and pointer in seen else tensor
        seen.add(pointer)
    return out
