"""One-pass CPU kernels for the optimizers' float32 updates, compiled from C on first use.

The multi-tensor path runs an update as a sequence of in-place operations, each a pass over
memory (or over a cache block). The kernels in ``kernels.c`` make one pass: each element's
parameter, gradient and state are read once and written once (Lion, ASGD, Rprop, Adadelta,
Adamax, NAdam, the Schedule-Free pair); Lamb and Adafactor, which need norms or row and column means
first, make the fewest passes those allow. They cover contiguous float32 tensors on the CPU;
every other case, and every machine where they cannot be built, takes the multi-tensor path.

Each kernel line mirrors one torch operation, rounding as torch's CPU kernels do, so updates
made of elementwise operations give the multi-tensor path's bits. What differs in the last
bits, within the float32 bound the optimizer tests use: the kernels' square root is correctly
rounded (torch's float32 one, MKL's, is not always), sums run in another order, and NAdam's
multi-tensor path takes its momentum term through torch's fused Adam.

Building needs a C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) and takes under a
second; the library is kept in ``$PLUGTRAIN_CACHE_DIR/kernels`` (else
``$XDG_CACHE_HOME/plugtrain/kernels`` or ``~/.cache/plugtrain/kernels``), named by a hash of
the source, the compiler, its flags and the CPU, so a change to any of them builds anew.
``PLUGTRAIN_NATIVE_KERNELS=0`` turns the kernels off. A loop over at least
:data:`PARALLEL_ELEMENTS` elements is split between torch's intra-op threads, on the OpenMP
runtime torch itself uses (built with ``-fopenmp``, the library links the ``libgomp`` torch
has loaded): the threads torch's last operation left idle or spinning take it at once, where
threads of another pool would wait for a core. A compiler without OpenMP gives a library whose
loops run on one thread.
"""

from __future__ import annotations

import ctypes
import functools
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
    "lion": "iipppffff",
    "adadelta": "iippppffffff",
    "asgd": "iipppfffff",
    "rprop": "iippppffff",
    "adamax": "iippppffffff",
    "nadam": "iippppfffffff",
    "adamw_schedule_free": "iippppffffff",
    "adamw_schedule_free_decay": "iippppffffffff",
    "sgd_schedule_free": "iipppffff",
    "lamb_moments": "iippppdfffff",
    "lamb_apply": "iipppfff",
    "adafactor_stats": "iiipppdd",
    "adafactor_rms": "iiipppd",
    "adafactor_apply": "iiippppff",
    "adafactor_matrices": "iiiippppdffffffff",
}
"""Each kernel's C arguments: ``i`` an int64, ``p`` a pointer to floats, ``d`` a pointer to
doubles (sums), ``f`` a float.

An elementwise kernel (:meth:`NativeKernels.run`) takes the element count, the number of
threads, its float32 arrays, a pointer to its sums if it has any, then its scalars.
"""

PARALLEL_ELEMENTS = 1 << 15
"""Smallest buffer split between threads (below it, waking threads costs more than it saves)."""

_SOURCE = Path(__file__).with_name("kernels.c")
_FLAGS = ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno"]
# Tried in turn until one builds and loads. -fopenmp links the libgomp torch has loaded (one
# thread pool for torch and the kernels); -fopenmp-simd only vectorizes the sums (one thread).
_EXTRA_FLAGS = [
    ["-march=native", "-fopenmp"],
    ["-fopenmp"],
    ["-march=native", "-fopenmp-simd"],
    [],
]


class NativeKernels:
    """The built library: :meth:`run` calls one kernel over contiguous float32 CPU tensors."""

    def __init__(self, library: ctypes.CDLL, path: Path) -> None:
        self.path = path
        self.openmp = bool(library.plugtrain_openmp())
        self._functions = {}
        types = {"i": ctypes.c_int64, "p": ctypes.c_void_p, "d": ctypes.c_void_p}
        for name, spec in KERNELS.items():
            function = getattr(library, f"plugtrain_{name}")
            function.argtypes = [types.get(kind, ctypes.c_float) for kind in spec]
            function.restype = None
            self._functions[name] = function

    @staticmethod
    def threads(numel: int) -> int:
        """The threads for a loop over ``numel`` elements: torch's intra-op threads, or one.

        One in a process forked from one that ran parallel loops: GNU OpenMP's threads do not
        survive a fork, and a parallel loop there would wait for them forever.
        """
        if _forked or numel < PARALLEL_ELEMENTS:
            return 1
        return torch.get_num_threads()

    def run(
        self,
        name: str,
        tensors: Sequence[torch.Tensor],
        scalars: Sequence[float],
        sums: int = 0,
    ) -> list[float]:
        """Update ``tensors`` (an elementwise kernel's arrays, :func:`usable`) with ``scalars``.

        Returns the kernel's ``sums`` sums over all elements (its ``d`` argument).
        """
        n = tensors[0].numel()
        pointers = [t.data_ptr() for t in tensors]
        if not sums:
            self._functions[name](n, self.threads(n), *pointers, *scalars)
            return []
        totals = (ctypes.c_double * sums)()
        self._functions[name](n, self.threads(n), *pointers, ctypes.addressof(totals), *scalars)
        return list(totals)

    def call(self, name: str, *arguments: object) -> None:
        """Call kernel ``name`` with ``arguments`` as they are (:data:`KERNELS` says which)."""
        self._functions[name](*arguments)


_forked = False


def _after_fork_in_child() -> None:
    global _forked  # noqa: PLW0603 - set once, in the child
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)

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
    """The first build that compiles and loads, by :data:`_EXTRA_FLAGS` in turn."""
    problems = []
    try:
        compiler = _compiler()
        for extra in _EXTRA_FLAGS:
            try:
                path = _build(compiler, extra)
                kernels = NativeKernels(ctypes.CDLL(str(path)), path)
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
                problems.append(f"{' '.join(extra) or 'plain'}: {exc}")
                continue
            threads = "OpenMP threads" if kernels.openmp else "one thread"
            return kernels, f"loaded from {path} ({threads})"
    except RuntimeError as exc:
        problems.append(str(exc))
    reason = "not built: " + "; ".join(problems)
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


@functools.cache
def _compiler_version(compiler: str) -> str:
    return subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, timeout=60, check=False
    ).stdout


def _build(compiler: str, extra: list[str]) -> Path:
    """The library built with flags ``extra``: from the cache, or compiled into it."""
    key = hashlib.sha256()
    flags = " ".join([*_FLAGS, *extra])
    for part in (_SOURCE.read_bytes(), _compiler_version(compiler), flags, _cpu()):
        key.update(part if isinstance(part, bytes) else part.encode())
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
        command = [compiler, *_FLAGS, *extra, str(_SOURCE), "-o", scratch, "-lm"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:
            message = f"{compiler} failed: {result.stderr.strip()[-400:] or 'no message'}"
            raise RuntimeError(message)
        os.replace(scratch, target)  # atomic: another process may be building it too
        return target
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
