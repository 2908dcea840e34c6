"""One-pass CPU kernels for the optimizers' float32 updates, compiled from C on first use.

The multi-tensor path runs an update as a sequence of in-place operations, each a pass over
memory (or over a cache block). The kernels in ``kernels.c`` make one pass: each element's
parameter, gradient and state are read once and written once (Lion, ASGD, Rprop, Adadelta,
the Schedule-Free pair); Lamb and Adafactor, which need norms or row and column means first,
make the fewest passes those allow. They cover contiguous float32 tensors on the CPU; every
other case, and every machine where they cannot be built, takes the multi-tensor path.

Each kernel line mirrors one torch operation, rounding as torch's CPU kernels do, so updates
made of elementwise operations give the multi-tensor path's bits. Two things differ in the
last bits, within the float32 bound the optimizer tests use: the kernels' square root is
correctly rounded (torch's float32 one, MKL's, is not always), and sums run in another order.

Building needs a C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) and takes about a
tenth of a second; the library is kept in ``$PLUGTRAIN_CACHE_DIR/kernels`` (else
``$XDG_CACHE_HOME/plugtrain/kernels`` or ``~/.cache/plugtrain/kernels``), named by a hash of
the source, the compiler, its flags and the CPU, so a change to any of them builds anew.
``PLUGTRAIN_NATIVE_KERNELS=0`` turns the kernels off. A buffer of at least
:data:`PARALLEL_ELEMENTS` elements is split between torch's intra-op threads (the kernels run
on Python threads, with the GIL released by :mod:`ctypes`); a smaller one runs on the caller's.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

__all__ = [
    "KERNELS",
    "PARALLEL_ELEMENTS",
    "SWITCH_VARIABLE",
    "NativeKernels",
    "load",
    "reset",
    "set_enabled",
    "status",
    "usable",
    "usable_matrix",
    "usable_pair",
]

_log = logging.getLogger(__name__)

SWITCH_VARIABLE = "PLUGTRAIN_NATIVE_KERNELS"
"""Set to ``0`` to take the multi-tensor path everywhere."""

KERNELS: dict[str, str] = {
    "lion": "ipppffff",
    "adadelta": "ippppffffff",
    "asgd": "ipppfffff",
    "rprop": "ippppffff",
    "adamw_schedule_free": "ippppffffff",
    "adamw_schedule_free_decay": "ippppffffffff",
    "sgd_schedule_free": "ipppffff",
    "lamb_moments": "ippppdfffff",
    "lamb_apply": "ipppfff",
    "adafactor_stats": "iippppp",
    "adafactor_rms": "iipppp",
    "adafactor_apply": "iippppff",
    "adafactor_matrices": "iiipppppffffffff",
}
"""Each kernel's C arguments: ``i`` an int64, ``p`` a pointer, ``d`` a pointer to double sums
(a reduction's results), ``f`` a float.

An elementwise kernel (:meth:`NativeKernels.run`) takes the element count, float32 arrays,
the sums pointer if any, then its scalars.
"""

PARALLEL_ELEMENTS = 1 << 15
"""Smallest buffer split between threads (below it, starting a thread costs more than it saves)."""

_ALIGN = 16  # elements: each thread's share starts on a 64-byte cache line
_SOURCE = Path(__file__).with_name("kernels.c")
_FLAGS = ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno"]
# Tried in turn: the first a compiler accepts is used (-fopenmp-simd vectorizes the sums only;
# no OpenMP runtime is linked).
_EXTRA_FLAGS = [["-march=native", "-fopenmp-simd"], ["-fopenmp-simd"], []]


class NativeKernels:
    """The built library: :meth:`run` calls one kernel over contiguous float32 CPU tensors."""

    def __init__(self, library: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self._functions = {}
        types = {"i": ctypes.c_int64, "p": ctypes.c_void_p, "d": ctypes.c_void_p}
        for name, spec in KERNELS.items():
            function = getattr(library, f"plugtrain_{name}")
            function.argtypes = [types.get(kind, ctypes.c_float) for kind in spec]
            function.restype = None
            self._functions[name] = function
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0

    def run(
        self,
        name: str,
        tensors: Sequence[torch.Tensor],
        scalars: Sequence[float],
        sums: int = 0,
    ) -> list[float]:
        """Update ``tensors`` (an elementwise kernel's arrays, :func:`usable`) with ``scalars``.

        Returns the kernel's ``sums`` sums over all elements (a ``d`` argument, one buffer per
        thread, added up here).
        """
        n = tensors[0].numel()
        pointers = [t.data_ptr() for t in tensors]
        threads = torch.get_num_threads()
        share = n if threads <= 1 or n < PARALLEL_ELEMENTS else -(-n // threads)
        share += -share % _ALIGN
        starts = range(0, n, share) if n else range(1)
        totals = [(ctypes.c_double * sums)() for _ in starts] if sums else []
        calls = []
        for k, start in enumerate(starts):
            extra = [ctypes.addressof(totals[k])] if sums else []
            offsets = [p + 4 * start for p in pointers]
            calls.append((min(share, n - start), *offsets, *extra, *scalars))
        self.call(name, calls)
        return [sum(t[i] for t in totals) for i in range(sums)]

    def call(self, name: str, calls: Sequence[Sequence[object]]) -> None:
        """Call kernel ``name`` once with each argument list, all at once (one per thread)."""
        function = self._functions[name]
        pending: list[Future[None]] = []
        if len(calls) > 1:
            pool = self._executor(len(calls) - 1)
            pending = [pool.submit(function, *call) for call in calls[1:]]
        function(*calls[0])
        for future in pending:
            future.result()

    def close(self) -> None:
        """Stop the thread pool (its threads end once idle); a later call starts a new one."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self.forget_pool()

    def forget_pool(self) -> None:
        """Drop the thread pool without waiting for it (in a forked child, where it is gone)."""
        self._pool, self._pool_size = None, 0

    def _executor(self, workers: int) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_size < workers:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="plugtrain-kernel")
            self._pool_size = workers
        return self._pool


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def usable_pair(a: torch.Tensor, b: torch.Tensor) -> bool:
    """:func:`usable` for two tensors, quicker (called per parameter on many small ones)."""
    if type(a) not in _PLAIN or type(b) not in _PLAIN:
        return False
    if a.dtype != torch.float32 or b.dtype != torch.float32 or not (a.is_cpu and b.is_cpu):
        return False
    if not (a.is_contiguous() and b.is_contiguous()) or a.shape != b.shape:
        return False
    if a.is_neg() or b.is_neg():  # a lazily negated view: its memory holds -value
        return False
    return abs(a.data_ptr() - b.data_ptr()) >= 4 * a.numel()


def usable_matrix(p: torch.Tensor, g: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> bool:
    """Whether a kernel can update matrix ``p`` (gradient ``g``, statistics ``row``, ``col``)."""
    if not usable_pair(p, g):
        return False
    for t in (row, col):
        if type(t) not in _PLAIN or t.dtype != torch.float32 or not t.is_cpu:
            return False
        if not t.is_contiguous() or t.is_neg():
            return False
    return row.numel() == p.shape[0] and col.numel() == p.shape[1]


def usable(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether a kernel can update ``tensors``: float32, CPU, contiguous, equal sizes, distinct."""
    n = tensors[0].numel()
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_cpu or t.numel() != n:
            return False
        if type(t) not in _PLAIN or not t.is_contiguous() or t.is_neg():
            return False  # a subclass (a DTensor, say) is not what its data pointer holds
    if len(tensors) == 1:
        return True
    starts = sorted(t.data_ptr() for t in tensors)
    return all(b - a >= 4 * n for a, b in itertools.pairwise(starts))


_lock = threading.Lock()
_loaded: NativeKernels | None = None
_tried = False
_reason = "not built yet"
_enabled = True


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's pool threads: start a new pool when needed."""
    if _loaded is not None:
        _loaded.forget_pool()


os.register_at_fork(after_in_child=_after_fork_in_child)


def load() -> NativeKernels | None:
    """The kernels, built and loaded on the first call; ``None`` where they cannot be.

    The reason is :func:`status`; a failure is logged once (debug level) and not retried.
    ``PLUGTRAIN_NATIVE_KERNELS=0`` at the first call, or :func:`set_enabled`, turns them off.
    """
    global _loaded, _tried, _reason  # noqa: PLW0603 - one library per process
    if not _tried:
        with _lock:
            if not _tried:
                value = os.environ.get(SWITCH_VARIABLE, "1").strip().lower()
                if value in ("0", "false", "no", "off"):
                    _reason = f"turned off by {SWITCH_VARIABLE}"
                else:
                    _loaded, _reason = _load()
                _tried = True
    return _loaded if _enabled else None


def _load() -> tuple[NativeKernels | None, str]:
    try:
        path = _build()
        return NativeKernels(ctypes.CDLL(str(path)), path), f"loaded from {path}"
    except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
        reason = f"not built: {exc}"
        _log.debug("plugtrain optimizers: native kernels %s", reason)
        return None, reason


def set_enabled(enabled: bool) -> None:
    """Turn the kernels off or back on for the steps that follow.

    For comparisons in one process (the bench); the library stays loaded.
    """
    global _enabled  # noqa: PLW0603
    _enabled = enabled


def status() -> str:
    """Whether the kernels are in use, and where they came from or why not."""
    if not _enabled:
        return "turned off by set_enabled(False)"
    return _reason


def reset() -> None:
    """Forget the loaded kernels, so that the next :func:`load` looks again (for tests)."""
    global _loaded, _tried, _reason, _enabled
    with _lock:
        if _loaded is not None:
            _loaded.close()
        _loaded, _tried, _reason, _enabled = None, False, "not built yet", True


def _compiler() -> str:
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(candidate):
            return candidate
    raise RuntimeError("no C compiler found ($CC, cc, gcc or clang)")


def _cache_dir() -> Path:
    base = os.environ.get("PLUGTRAIN_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "plugtrain")
    return Path(base) / "kernels"


def _cpu() -> str:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU's feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            flags = next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = ""
    return f"{platform.machine()} {platform.processor()} {flags}"


def _build() -> Path:
    """The library's path, compiled into the cache unless a build with the same key is there."""
    compiler = _compiler()
    source = _SOURCE.read_bytes()
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    key = hashlib.sha256()
    flags = " ".join(_FLAGS + [" ".join(extra) for extra in _EXTRA_FLAGS])
    for part in (source, version.encode(), flags.encode(), _cpu().encode()):
        key.update(part)
        key.update(b"\0")
    name = f"plugtrain_optimizers_{key.hexdigest()[:20]}.so"
    try:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-")  # noqa: SIM115
        probe.close()
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="plugtrain-kernels-"))
    target = folder / name
    if target.exists():
        return target
    handle, scratch = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    os.close(handle)
    try:
        errors = ""
        for extra in _EXTRA_FLAGS:
            command = [compiler, *_FLAGS, *extra, str(_SOURCE), "-o", scratch, "-lm"]
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=300, check=False
            )
            if result.returncode == 0:
                os.replace(scratch, target)  # atomic: another process may be building it too
                return target
            errors = result.stderr.strip()
        message = f"{compiler} failed: {errors[-400:] or 'no message'}"
        raise RuntimeError(message)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
