"""The one-pass C kernels give the multi-tensor path's numbers, and step aside where they cannot.

Each case steps the same parameters with the kernels on and off (the default constructor path
either way). Updates made of elementwise operations only (Lion, ASGD, Rprop, Adamax,
Schedule-Free SGD) must match to the bit: each kernel line mirrors one torch operation,
rounding as torch does. Updates with a square root (Adadelta, NAdam, Schedule-Free AdamW) or
with norms and means (Lamb, Adafactor) are held to the bound the float32 layout tests use: the
kernels' square root is correctly rounded where torch's float32 one is not always, NAdam's
torch path goes through torch's fused Adam, and sums run in another order.

The numbers are checked for the library built for this CPU and for the one built for AVX2
(``-march=x86-64-v3``, where an x86-64 compiler can build it): each build once per module. The
steps run without the step tuner, which could take the torch path for some of them.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import torch

import plugtrain
from plugtrain_optimizers import _native
from plugtrain_optimizers._threads import TUNE_VARIABLE

# (optimizer, arguments, shapes, exact): shapes include a large tensor (split between threads),
# odd sizes (elements outside whole SIMD vectors) and a vector.
SMALL = [(7, 13), (5,), (31,), (9, 9), (6, 11)]
LARGE = [(300, 129), (17,)]  # 38700 elements: above PARALLEL_ELEMENTS
CASES: dict[str, tuple[str, dict[str, Any], list[tuple[int, ...]], bool]] = {
    "Lion": ("Lion", {"lr": 1e-3}, SMALL + LARGE, True),
    "Lion-decay": ("Lion", {"lr": 1e-3, "weight_decay": 0.1}, SMALL, True),
    "ASGD": ("ASGD", {"lr": 0.05}, SMALL + LARGE, True),
    "ASGD-averaging": (
        "ASGD",
        {"lr": 0.05, "t0": 1, "weight_decay": 0.1, "maximize": True},
        SMALL,
        True,
    ),
    "Rprop": ("Rprop", {"lr": 0.01}, SMALL + LARGE, True),
    "Adamax": ("Adamax", {"lr": 0.01}, SMALL + LARGE, True),
    "Adamax-decay": ("Adamax", {"lr": 0.01, "weight_decay": 0.1, "maximize": True}, SMALL, True),
    "SGDScheduleFree": ("SGDScheduleFree", {"lr": 0.05, "warmup_steps": 2}, SMALL + LARGE, True),
    "SGDScheduleFree-decay": (
        "SGDScheduleFree",
        {"lr": 0.05, "weight_decay": 0.01, "momentum": 0.8},
        SMALL,
        True,
    ),
    "Adadelta": ("Adadelta", {}, SMALL + LARGE, False),
    "Adadelta-decay": ("Adadelta", {"weight_decay": 0.1, "maximize": True}, SMALL, False),
    "AdamWScheduleFree": (
        "AdamWScheduleFree",
        {"lr": 0.05, "warmup_steps": 2},
        SMALL + LARGE,
        False,
    ),
    "AdamWScheduleFree-decay": (
        "AdamWScheduleFree",
        {"lr": 0.05, "weight_decay": 0.01, "r": 0.5},
        SMALL,
        False,
    ),
    "NAdam": ("NAdam", {"lr": 0.01}, SMALL + LARGE, False),
    "NAdam-decay": ("NAdam", {"lr": 0.01, "weight_decay": 0.1}, SMALL, False),
    "Lamb": ("Lamb", {"lr": 0.01}, [(300, 129), (129,), (200, 200)], False),
    "Lamb-decay": ("Lamb", {"lr": 0.01, "weight_decay": 0.1}, [(300, 129), (129,)], False),
    "Lamb-adam": ("Lamb", {"lr": 0.01, "adam": True}, [(300, 129)], False),
    "Adafactor": ("Adafactor", {"lr": 0.01}, [(7, 13), (5,), (9, 9), (2, 3, 4), *LARGE], False),
    "Adafactor-decay": (
        "Adafactor",
        {"lr": 0.01, "weight_decay": 0.1, "scale_parameter": False},
        [(7, 13), (300, 129), (31,)],
        False,
    ),
    "Adafactor-many": ("Adafactor", {"lr": 0.01}, [(10, 12)] * 40 + [(12, 10)] * 3, False),
}


def _params(shapes: list[tuple[int, ...]]) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]


def _step(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:  # a gradient depending on the point, as backward's would
        p.grad = 0.5 * p.detach() + torch.randn(p.shape, generator=gen)
    optimizer.step()


def _run(
    case: str,
    *,
    native: bool,
    steps: int = 5,
    threads: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict:
    name, args, shapes, _ = CASES[case]
    args = {**args, **(extra or {})}
    os.environ[_native.SWITCH_VARIABLE] = "1" if native else "0"
    os.environ[TUNE_VARIABLE] = "0"  # the kernels, on all threads, at every step
    _native.reset()
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        params = _params(shapes)
        optimizer = plugtrain.resolve("optimizer", name)(params, **args)
        for step in range(steps):
            _step(optimizer, params, step)
        assert (_native.load() is not None) == native, _native.status()
    finally:
        torch.set_num_threads(before)
    found = {f"p{i}": p.detach().clone() for i, p in enumerate(params)}
    for i, p in enumerate(params):
        for key, value in optimizer.state[p].items():
            if isinstance(value, torch.Tensor) and value.dim():
                found[f"{key}{i}"] = value.clone()
    return found


@pytest.fixture(autouse=True)
def _restore_switch(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(_native.SWITCH_VARIABLE, raising=False)
    monkeypatch.setenv(TUNE_VARIABLE, os.environ.get(TUNE_VARIABLE, "1"))  # restored after
    yield
    os.environ.pop(_native.SWITCH_VARIABLE, None)
    _native.reset()


@pytest.fixture(scope="module")
def built() -> _native.NativeKernels:
    """The kernels, built (or found in the cache) once for this module.

    Skipped on a machine without a C compiler (the torch path runs there, which the rest of
    the suite tests); with one, a failed build fails.
    """
    try:
        _native._compiler()
    except RuntimeError as exc:
        pytest.skip(f"the kernels cannot be built here: {exc}")
    _native.reset()
    kernels = _native.load()
    if kernels is None:
        pytest.fail(f"the native kernels did not build here: {_native.status()}")
    return kernels


TARGETS = ["native", "x86-64-v3"]


@pytest.fixture(scope="module", params=TARGETS)
def target_build(request: pytest.FixtureRequest, built: _native.NativeKernels) -> str:
    """Each build in turn, built (or found in the cache) once for the module.

    The AVX2 build is skipped where the compiler cannot build for it (not an x86-64 machine).
    """
    if request.param != "native":
        try:
            kernels = _native.build_for(request.param)
        except RuntimeError as exc:
            pytest.skip(str(exc))
        if f"-march={request.param}" not in kernels.flags:
            pytest.skip(f"the compiler does not build for -march={request.param} here")
    return str(request.param)


@pytest.fixture
def target(target_build: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernels of the test are those of ``target_build`` (``PLUGTRAIN_NATIVE_MARCH``)."""
    monkeypatch.setenv(_native.MARCH_VARIABLE, target_build)
    return target_build


def test_each_target_is_its_own_library(target):
    _native.reset()
    kernels = _native.load()
    assert kernels is not None, _native.status()
    assert f"-march={target}" in kernels.flags
    assert f"-march={target}" in _native.status()
    other = _native.build_for("native" if target != "native" else "x86-64-v3")
    assert other.path != kernels.path  # a cache key per target


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_kernels_give_the_multi_tensor_numbers(target, case):
    exact = CASES[case][3]
    with_kernels, without = _run(case, native=True), _run(case, native=False)
    assert with_kernels.keys() == without.keys()
    for key, value in with_kernels.items():
        if exact:
            assert torch.equal(value, without[key]), f"{key}: {(value - without[key]).abs().max()}"
        else:
            torch.testing.assert_close(value, without[key], rtol=1e-6, atol=1e-7, msg=key)


@pytest.mark.parametrize(
    "case", ["Lion", "ASGD", "Rprop", "Adamax", "Adadelta", "AdamWScheduleFree"]
)
def test_threads_split_an_elementwise_update_without_changing_a_bit(target, case):
    one, two = _run(case, native=True, threads=1), _run(case, native=True, threads=2)
    for key, value in one.items():
        assert torch.equal(value, two[key]), key


@pytest.mark.parametrize("case", ["Lamb", "Adafactor"])
def test_threads_split_the_sums_within_the_float32_bound(target, case):
    one, two = _run(case, native=True, threads=1), _run(case, native=True, threads=2)
    for key, value in one.items():
        torch.testing.assert_close(value, two[key], rtol=1e-6, atol=1e-7, msg=key)


def test_a_step_counts_as_an_in_place_change_for_autograd(built):
    """As torch's in-place operations do (a flat group's buffers are what those change)."""
    params = _params([(64, 600), (7, 13)])
    optimizer = plugtrain.resolve("optimizer", "Lion")(params, lr=1e-3, flat=False)
    versions = [p._version for p in params]
    _step(optimizer, params, 0)
    assert all(p._version > v for p, v in zip(params, versions, strict=True))


def test_what_a_kernel_cannot_take_goes_the_multi_tensor_way(built):
    """float64, a transposed (non-contiguous) parameter and foreach=False: the same numbers."""
    gen = torch.Generator().manual_seed(0)
    cases = [
        ([torch.randn(40, 50, generator=gen, dtype=torch.float64)], {}),
        ([torch.randn(50, 40, generator=gen).t()], {}),
        ([torch.randn(40, 50, generator=gen)], {"foreach": False}),
    ]
    for tensors, extra in cases:
        results = []
        for native in (True, False):
            os.environ[_native.SWITCH_VARIABLE] = "1" if native else "0"
            _native.reset()
            params = [torch.nn.Parameter(t.clone()) for t in tensors]
            optimizer = plugtrain.resolve("optimizer", "Lion")(params, lr=1e-3, **extra)
            for step in range(3):
                _step(optimizer, params, step)
            results.append(params[0].detach())
        assert torch.equal(*results)


def test_the_library_is_built_once_and_kept_in_the_cache(built, tmp_path, monkeypatch):
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(tmp_path))
    _native.reset()
    first = _native.load()
    assert first is not None
    assert first.path.parent == tmp_path / "kernels"
    stamp = first.path.stat().st_mtime_ns
    _native.reset()
    again = _native.load()
    assert again is not None
    assert again.path == first.path
    assert again.path.stat().st_mtime_ns == stamp  # found, not compiled again
    built_files = [p.name for p in (tmp_path / "kernels").iterdir() if p.name != ".lock"]
    assert sorted(built_files) == [first.path.name, f"{first.path.name}.sha256"]  # + its digest


def test_without_a_compiler_steps_take_the_multi_tensor_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("PATH", str(tmp_path))
    _native.reset()
    assert _native.load() is None
    assert "no C compiler found" in _native.status()
    params = _params([(7, 13)])
    optimizer = plugtrain.resolve("optimizer", "Lion")(params, lr=1e-3)
    before = params[0].detach().clone()
    _step(optimizer, params, 0)
    assert not torch.equal(params[0].detach(), before)


def test_the_switch_turns_the_kernels_off(monkeypatch):
    monkeypatch.setenv(_native.SWITCH_VARIABLE, "0")
    _native.reset()
    assert _native.load() is None
    assert _native.status() == f"turned off by {_native.SWITCH_VARIABLE}"


def test_a_forked_child_steps_on_one_thread(built):
    """OpenMP's threads do not survive a fork: a parallel loop in the child would wait forever.

    The child runs no torch operation but the step (torch's own parallel operations hang
    there), and gives up after 30 s rather than hang the suite.
    """
    params = _params([(300, 129)])
    optimizer = plugtrain.resolve("optimizer", "Lion")(params, lr=1e-3)
    _step(optimizer, params, 0)  # the parent's pool is running now
    before = params[0].detach()[0, 0].item()
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)
        try:
            optimizer.step()  # above PARALLEL_ELEMENTS: two threads in the parent
            os._exit(0 if params[0].detach()[0, 0].item() != before else 3)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit code
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_set_enabled_switches_the_kernels_within_a_process(built):
    _native.reset()
    assert _native.load() is not None
    _native.set_enabled(False)
    assert _native.load() is None
    assert _native.status() == "turned off by set_enabled(False)"
    _native.set_enabled(True)
    assert _native.load() is not None


def test_a_build_without_openmp_runs_on_one_thread_with_the_same_numbers(
    built, tmp_path, monkeypatch, caplog
):
    """Where torch's threads are not GNU OpenMP's (LLVM's libomp on macOS, say): one thread,
    the same bits, said once."""
    with_openmp = _run("Lion", native=True)
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_native, "_torch_not_gnu_openmp", lambda: "torch runs libomp.dylib")
    _native.reset()
    with caplog.at_level("WARNING", logger=_native.__name__):
        kernels = _native.load()
        _native.load()
    assert kernels is not None
    assert not kernels.openmp
    assert "(one thread; -march=native)" in _native.status()
    assert [r.getMessage() for r in caplog.records] == [
        "plugtrain optimizers: the C kernels run on one thread: torch runs libomp.dylib"
    ]
    monkeypatch.setattr(_native, "load", lambda: kernels)  # _run's reset would build anew
    without = _run("Lion", native=True)
    for key, value in with_openmp.items():
        assert torch.equal(value, without[key]), key


@pytest.mark.parametrize("case", sorted(CASES))
def test_foreach_false_is_the_reference_loop_whatever_the_switch(built, case):
    """``foreach=False`` steps with torch operations one tensor at a time: no kernel runs."""
    reference = {"foreach": False}
    with_kernels = _run(case, native=True, steps=3, extra=reference)
    without = _run(case, native=False, steps=3, extra=reference)
    for key, value in with_kernels.items():
        assert torch.equal(value, without[key]), key


def test_a_target_that_is_not_a_name_builds_nothing(monkeypatch):
    """``PLUGTRAIN_NATIVE_MARCH`` goes into a compiler's arguments: a name, or no build."""
    monkeypatch.setenv(_native.MARCH_VARIABLE, "native -o /tmp/elsewhere")
    _native.reset()
    assert _native.load() is None
    assert "is not a -march target name" in _native.status()
