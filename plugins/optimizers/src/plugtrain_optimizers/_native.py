"""One-pass CPU kernels for the optimizers' float32 updates, as torch operators.

The kernels in ``kernels.c`` read each element's parameter, gradient and state once and write
them once (Lion, ASGD, Rprop, Adadelta, Adamax, NAdam, the Schedule-Free pair); Lamb and
Adafactor make the fewest passes their norms and means allow. Each line mirrors one torch
operation, rounding as torch's CPU kernels do. C function ``plugtrain_<name>`` is operator
``torch.ops.plugtrain.<name>``, its schema read from the C declaration (a pointer is a tensor,
written unless ``const``; an array of pointers a list of tensors; an elementwise function's
element and thread counts are filled in). :func:`load` builds the library when an optimizer
with kernels is made, into ``$PLUGTRAIN_CACHE_DIR/kernels`` (else ``~/.cache/plugtrain/kernels``)
under a hash of source, compiler, flags and CPU, one process at a time (a file lock); only a
library this user built is loaded (:mod:`plugtrain_optimizers._kernel_cache`). With GNU
OpenMP (``libgomp.so.1``) as torch's runtime, ``-fopenmp`` links it and loops over
:data:`PARALLEL_ELEMENTS` elements or more use torch's threads; elsewhere one thread, said once.

The library is built for this CPU (``-march=native``) unless ``PLUGTRAIN_NATIVE_MARCH`` names
another target (``x86-64-v3``: AVX2 and FMA, no AVX-512), each target its own cached library.
Every loop is vectorized on any target (``kernels.c`` says how); the flags change no result.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from plugtrain_optimizers import _kernel_cache

try:
    import fcntl
except ImportError:  # no flock (Windows): processes building at once each compile
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MARCH_VARIABLE",
    "PARALLEL_ELEMENTS",
    "SWITCH_VARIABLE",
    "NativeKernels",
    "build_for",
    "call",
    "calls",
    "flag_sets",
    "load",
    "op",
    "reset",
    "set_enabled",
    "status",
    "target",
    "torch_path",
    "usable",
    "usable_matrix",
    "use",
]

_log = logging.getLogger(__name__)

SWITCH_VARIABLE = "PLUGTRAIN_NATIVE_KERNELS"
"""Set to ``0`` to take the multi-tensor path everywhere."""

MARCH_VARIABLE = "PLUGTRAIN_NATIVE_MARCH"
"""The ``-march`` the kernels are built for (default ``native``: this CPU)."""

PARALLEL_ELEMENTS = 1 << 15
"""Smallest buffer split between threads (below it, waking threads costs more than it saves)."""

_SOURCE = Path(__file__).with_name("kernels.c")
# -fno-math-errno lets sqrtf be one SIMD instruction; no flag here changes a result (no
# -ffast-math, -fno-trapping-math or -ffinite-math-only: the loops vectorize without them).
_FLAGS = ["-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno"]
_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def target() -> str:
    """The ``-march`` target asked for: ``$PLUGTRAIN_NATIVE_MARCH``, else ``native``."""
    return os.environ.get(MARCH_VARIABLE, "").strip() or "native"


def flag_sets(march: str) -> list[list[str]]:
    """The flags beyond the common ones, tried in turn until a build compiles and loads.

    -fopenmp only where torch runs GNU OpenMP (the caller skips it elsewhere); without
    ``-march=<march>`` if the compiler does not know the target.
    """
    if not _TARGET_NAME.fullmatch(march):
        raise RuntimeError(f"{MARCH_VARIABLE}={march!r} is not a -march target name")
    arch = f"-march={march}"
    return [[arch, "-fopenmp"], ["-fopenmp"], [arch, "-fopenmp-simd"], []]


class NativeKernels:
    """The built library, whose C functions the ``torch.ops.plugtrain`` operators call."""

    def __init__(
        self, library: ctypes.CDLL, path: Path, openmp: bool, flags: Sequence[str] = ()
    ) -> None:
        self.path = path
        self.openmp = openmp
        self.flags = list(flags)
        """The flags it was built with beyond the common ones (``-march=...``, ``-fopenmp``)."""
        self.functions: dict[str, Callable[..., None]] = {}
        for name, parameters in _declarations().items():
            function = getattr(library, f"plugtrain_{name}")
            function.argtypes = [
                ctypes.c_void_p if "*" in p else _C_TYPES[p.split(" ")[0]] for p in parameters
            ]
            function.restype = None
            self.functions[name] = function

    def threads(self, numel: int) -> int:
        """The threads for a loop over ``numel`` elements: torch's intra-op threads, or one.

        One without OpenMP, and in a process forked from one that ran parallel loops: GNU
        OpenMP's threads do not survive a fork, and a parallel loop there would wait forever.
        """
        if _forked or not self.openmp or numel < PARALLEL_ELEMENTS:
            return 1
        return torch.get_num_threads()


_C_TYPES = {"int64_t": ctypes.c_int64, "float": ctypes.c_float}
_DECLARATION = re.compile(r"^void plugtrain_(\w+)\(([^)]*)\)", re.MULTILINE)
_ELEMENTWISE = ["int64_t n", "int64_t threads"]


@functools.cache
def _declarations() -> dict[str, list[str]]:
    """Each exported C function's parameters (``"const float *const *g"``, say)."""
    found = _DECLARATION.findall(_SOURCE.read_text(encoding="utf-8").replace("RESTRICT ", ""))
    return {name: [" ".join(p.split()) for p in params.split(",")] for name, params in found}


def _schema(parameters: list[str]) -> str:
    """An operator's arguments from its C function's (an elementwise one's counts left out)."""
    arguments, written = [], 0
    for parameter in parameters[2:] if parameters[:2] == _ELEMENTWISE else parameters:
        kind, name = parameter.split(" ")[0], parameter.rsplit("*", 1)[-1].split(" ")[-1]
        if "*" not in parameter:
            arguments.append(f"{'int' if kind == 'int64_t' else 'float'} {name}")
            continue
        alias = "" if kind == "const" else f"({chr(ord('a') + written)}!)"
        written += alias != ""
        arguments.append(f"Tensor{alias}{'[]' if parameter.count('*') == 2 else ''} {name}")
    return ", ".join(arguments)


def op(name: str) -> Callable[..., None]:
    """Operator ``torch.ops.plugtrain.<name>`` (defined by the first :func:`load`)."""
    return _ops[name]


def call(name: str, *arguments: object) -> None:
    """C function ``plugtrain_<name>`` on C arguments a caller keeps, named for the profiler."""
    global _calls  # noqa: PLW0603 - a count, read by the step tuner
    _calls += 1
    with torch.profiler.record_function(f"plugtrain::{name}"):
        _current.functions[name](*arguments)  # type: ignore[union-attr]


_calls = 0


def calls() -> int:
    """How many kernel calls this process has made (the step tuner: did a step run any?)."""
    return _calls


_bypass = threading.local()


@contextmanager
def torch_path() -> Iterator[None]:
    """Within the block, :func:`load` answers ``None`` in this thread: steps take the torch path.

    The step tuner times the torch-operation path this way, as one of its plans.
    """
    before = getattr(_bypass, "on", False)
    _bypass.on = True
    try:
        yield
    finally:
        _bypass.on = before


_forked = False


def _after_fork_in_child() -> None:
    global _forked  # noqa: PLW0603 - set once, in the child
    _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)

_PLAIN = (torch.Tensor, torch.nn.Parameter)


def usable_matrix(p: torch.Tensor, g: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> bool:
    """Whether a kernel can update matrix ``p`` (gradient ``g``, statistics ``row``, ``col``)."""
    if g.shape != p.shape or row.numel() != p.shape[0] or col.numel() != p.shape[1]:
        return False
    return usable([p, g]) and usable([row]) and usable([col])


def usable(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether a kernel can update ``tensors``: float32, CPU, contiguous, equal sizes, distinct."""
    n = tensors[0].numel()
    for t in tensors:
        if t.dtype != torch.float32 or not t.is_cpu or t.numel() != n:
            return False
        if type(t) not in _PLAIN or not t.is_contiguous() or t.is_neg():
            return False  # a subclass (a DTensor, say) is not what its data pointer holds
    starts = sorted(t.data_ptr() for t in tensors)
    return all(b - a >= 4 * n for a, b in itertools.pairwise(starts))


_lock = threading.Lock()
_loaded: NativeKernels | None = None
_tried = False
_reason = "not built yet"
_enabled = True
_current: NativeKernels | None = None  # what the operators call: the last library loaded
_ops: dict[str, Callable[..., None]] = {}
_libraries: list[torch.library.Library] = []  # the operators live as long as the process


def load() -> NativeKernels | None:
    """The kernels, built and loaded on the first call; ``None`` where they cannot be.

    Why not: :func:`status` (logged once, not retried). ``PLUGTRAIN_NATIVE_KERNELS=0`` at the
    first call, or :func:`set_enabled`, turns them off; within :func:`torch_path`, ``None``.
    """
    global _loaded, _tried, _reason, _current  # noqa: PLW0603 - one library per process
    with _lock:
        if not _tried:
            value = os.environ.get(SWITCH_VARIABLE, "1").strip().lower()
            if value in ("0", "false", "no", "off"):
                _reason = f"turned off by {SWITCH_VARIABLE}"
            else:
                _loaded, _reason = _load()
                if _loaded is not None:
                    _current = _loaded
                    _register()
            _tried = True
    if getattr(_bypass, "on", False):
        return None
    return _loaded if _enabled else None


def _load(march: str | None = None) -> tuple[NativeKernels | None, str]:
    """The first build for ``march`` (default :func:`target`) that compiles and loads."""
    problems = []
    no_openmp = _torch_not_gnu_openmp()
    if no_openmp and march is None:
        _log.warning("plugtrain optimizers: the C kernels run on one thread: %s", no_openmp)
    try:
        compiler = _compiler()
        for extra in flag_sets(march or target()):
            if no_openmp and "-fopenmp" in extra:
                continue
            try:
                path = _build(compiler, extra)
                library = ctypes.CDLL(str(path))
                kernels = NativeKernels(library, path, "-fopenmp" in extra, extra)
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
                problems.append(f"{' '.join(extra) or 'plain'}: {exc}")
                continue
            finally:
                _kernel_cache.remove_private_folders()  # a loaded library needs no file
            mode = "OpenMP threads" if kernels.openmp else "one thread"
            arch = next((f for f in extra if f.startswith("-march=")), "the default target")
            return kernels, f"loaded from {path} ({mode}; {arch})"
    except RuntimeError as exc:
        problems.append(str(exc))
    reason = "not built: " + "; ".join(problems)
    _log.debug("plugtrain optimizers: native kernels %s", reason)
    return None, reason


def build_for(march: str) -> NativeKernels:
    """The kernels built for ``-march=<march>`` (cached as any build), not yet in use.

    For benches and tests that compare targets in one process (:func:`use` switches).
    """
    kernels, reason = _load(march)
    if kernels is None:
        raise RuntimeError(f"the kernels for -march={march} were {reason}")
    return kernels


def use(kernels: NativeKernels) -> None:
    """Make the operators call ``kernels`` (from :func:`build_for`) from now on."""
    global _loaded, _tried, _reason, _current  # noqa: PLW0603
    with _lock:
        if not _libraries:
            _register()
        _loaded = _current = kernels
        _tried = True
        mode = "OpenMP threads" if kernels.openmp else "one thread"
        _reason = f"loaded from {kernels.path} ({mode}; {' '.join(kernels.flags) or 'plain'})"


def _torch_not_gnu_openmp() -> str:
    """Why the kernels cannot share torch's threads ("" when torch runs GNU OpenMP).

    ``-fopenmp`` links ``libgomp.so.1``: the runtime torch loaded only if that is its name.
    """
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return "torch's intra-op threads are not OpenMP's"
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "the OpenMP runtime torch loaded cannot be found"
    names = {line.rsplit("/", 1)[-1] for line in maps.splitlines() if "/libgomp" in line}
    if names != {"libgomp.so.1"}:
        return f"torch's OpenMP runtime is not GNU's libgomp.so.1 ({', '.join(names) or 'none'})"
    return ""


def _register() -> None:
    """Define the ``torch.ops.plugtrain`` operators once; as fake ones, they return nothing."""
    if _libraries:
        return
    library = torch.library.Library("plugtrain", "FRAGMENT")
    _libraries.append(library)
    for name, parameters in _declarations().items():
        library.define(f"{name}({_schema(parameters)}) -> ()")
        library.impl(name, _implementation(name, parameters), "CPU")
        torch.library.register_fake(f"plugtrain::{name}", lambda *_: None, lib=library)
        _ops[name] = getattr(torch.ops.plugtrain, name).default


def _implementation(name: str, parameters: list[str]) -> Callable[..., None]:
    """The CPU implementation of operator ``name``: C function ``plugtrain_<name>``."""
    elementwise = parameters[:2] == _ELEMENTWISE
    stars = [p.count("*") for p in parameters[2 if elementwise else 0 :]]
    tensors = [i for i, count in enumerate(stars) if count == 1]
    lists = [i for i, count in enumerate(stars) if count == 2]

    def run(*arguments: Any) -> None:
        global _calls  # noqa: PLW0603 - a count, read by the step tuner
        _calls += 1
        kernels = _current
        assert kernels is not None  # the operators are defined by the first load
        values = list(arguments)
        for i in tensors:
            values[i] = arguments[i].data_ptr()
        for i in lists:
            values[i] = (ctypes.c_void_p * len(arguments[i]))(*[t.data_ptr() for t in arguments[i]])
        if elementwise:
            n = arguments[0].numel()
            values[:0] = [n, kernels.threads(n)]
        kernels.functions[name](*values)

    return run


def set_enabled(enabled: bool) -> None:
    """Turn the kernels off or back on for the next steps (the library stays loaded)."""
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


def _build(compiler: str, extra: list[str]) -> Path:
    """The library built with flags ``extra``: from the cache, or compiled into it."""
    key = hashlib.sha256()
    flags = " ".join([*_FLAGS, *extra])
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False)
    for part in (_SOURCE.read_bytes(), version.stdout, flags, _cpu()):
        key.update(part if isinstance(part, bytes) else part.encode())
        key.update(b"\0")
    name = f"plugtrain_optimizers_{key.hexdigest()[:20]}.so"
    folder = _kernel_cache.cache_folder(_cache_dir())  # see there: which library is loaded
    target = folder / name
    if target.exists() and _kernel_cache.untrusted_library(target) is None:
        return target
    with open(folder / ".lock", "a+b") as lock:  # the first process builds, the others wait
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if target.exists():
            why = _kernel_cache.untrusted_library(target)
            if why is None:
                return target
            _log.warning("plugtrain optimizers: building the C kernels again: %s", why)
            target.unlink()
        handle, scratch = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        os.close(handle)
        try:
            command = [compiler, *_FLAGS, *extra, str(_SOURCE), "-o", scratch, "-lm"]
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=300, check=False
            )
            if result.returncode != 0:
                message = f"{compiler} failed: {result.stderr.strip()[-400:] or 'no message'}"
                raise RuntimeError(message)
            _kernel_cache.record_digest(Path(scratch), name)
            os.replace(scratch, target)  # atomic: readers see the whole library or none
            return target
        finally:
            if os.path.exists(scratch):
                os.unlink(scratch)
