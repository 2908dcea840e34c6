"""A device's peak FLOP/s, the denominator of model FLOPs utilisation (MFU).

GPUs: the vendor's dense (no structured sparsity) tensor-core peak for 16-bit types and the
plain FP32 peak, from a table by device name. CPUs: measured once by a short matmul probe in
the dtype asked for, cached in memory and in ``$XDG_CACHE_HOME/plugtrain/peak_flops.json`` (by
CPU model, thread count, dtype and torch version). A run file can give the number instead
(``Throughput: {peak_flops: ...}``), and a backend can report it (an optional
``peak_flops(dtype)`` member, since plugin API 1.1).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import time
from pathlib import Path

import torch

__all__ = ["GPU_PEAK_FLOPS", "cpu_peak_flops", "device_peak_flops", "gpu_peak_flops"]

GPU_PEAK_FLOPS: dict[str, tuple[float, float]] = {
    # name fragment (longest match wins): (bf16/fp16 dense tensor core, fp32) FLOP/s
    "H200": (989.4e12, 66.9e12),
    "H100 PCIe": (756.0e12, 51.2e12),
    "H100 NVL": (835.0e12, 60.0e12),
    "H100": (989.4e12, 66.9e12),  # SXM
    "H800": (989.4e12, 66.9e12),
    "GH200": (989.4e12, 66.9e12),
    "B200": (2250.0e12, 80.0e12),
    "A100": (312.0e12, 19.5e12),
    "A800": (312.0e12, 19.5e12),
    "A10G": (70.0e12, 31.2e12),
    "A10": (125.0e12, 31.2e12),
    "L40S": (362.05e12, 91.6e12),
    "L40": (181.0e12, 90.5e12),
    "L4": (121.0e12, 30.3e12),
    "RTX 4090": (165.2e12, 82.6e12),
    "RTX 3090": (71.0e12, 35.6e12),
    "V100": (125.0e12, 15.7e12),  # fp16 only: no bf16 tensor cores
    "T4": (65.0e12, 8.1e12),  # fp16
}
"""Peak FLOP/s of known GPUs by a fragment of ``torch.cuda.get_device_name()``."""

_HALF = (torch.float16, torch.bfloat16)


def gpu_peak_flops(name: str, dtype: torch.dtype) -> float | None:
    """The table's peak for the GPU called ``name`` computing in ``dtype``; ``None``: unknown."""
    matches = [fragment for fragment in GPU_PEAK_FLOPS if fragment in name]
    if not matches:
        return None
    half, single = GPU_PEAK_FLOPS[max(matches, key=len)]
    return half if dtype in _HALF else single


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "plugtrain" / "peak_flops.json"


def _cpu_key(dtype: torch.dtype) -> str:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}|threads={torch.get_num_threads()}|{dtype}|torch={torch.__version__}"


def _probe(dtype: torch.dtype, size: int = 512, repeats: int = 5) -> float:
    """The best FLOP/s of ``repeats`` ``size``-square matmuls in ``dtype`` on this CPU."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / max(best, 1e-9)


@functools.cache
def cpu_peak_flops(dtype: torch.dtype) -> float:
    """The CPU's matmul FLOP/s in ``dtype`` at the current thread count, probed once.

    The probe takes a fraction of a second; its result is cached in memory and on disk.
    """
    key = _cpu_key(dtype)
    path = _cache_file()
    cached: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        cached = dict(json.loads(path.read_text()))
    if isinstance(cached.get(key), int | float):
        return float(cached[key])
    value = _probe(dtype)
    cached[key] = value
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(cached, indent=1, sort_keys=True))
        partial.replace(path)
    return value


def device_peak_flops(device: torch.device, dtype: torch.dtype) -> float | None:
    """Peak FLOP/s of ``device`` in ``dtype``: the GPU table, the CPU probe; ``None``: unknown."""
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), dtype)
    if device.type == "cpu":
        return cpu_peak_flops(dtype)
    return None
