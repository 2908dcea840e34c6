"""The C kernels as torch operators: seen by the profiler, traced by torch.compile, built once.

The numbers the operators give are ``test_native.py``'s; here, how they are reached.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

import plugtrain
from plugtrain_optimizers import _native


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch):
    """The kernels, loaded afresh (skipped on a machine without a C compiler)."""
    monkeypatch.delenv(_native.SWITCH_VARIABLE, raising=False)
    try:
        compiler = _native._compiler()
    except RuntimeError as exc:
        pytest.skip(f"the kernels cannot be built here: {exc}")
    _native.reset()
    loaded = _native.load()
    assert loaded is not None, _native.status()
    yield compiler
    _native.reset()


def _params(*shapes: tuple[int, ...]) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    return params


@pytest.mark.parametrize(
    ("name", "shapes", "operators"),
    [
        ("Lion", [(40, 50)], ["plugtrain::lion_step"]),
        ("Lamb", [(300, 129)], ["plugtrain::lamb_moments", "plugtrain::lamb_apply"]),
        ("Adafactor", [(10, 12)] * 3, ["plugtrain::adafactor_matrices"]),
    ],
)
def test_a_step_shows_its_kernels_by_name_in_the_profiler(kernels, name, shapes, operators):
    optimizer = plugtrain.resolve("optimizer", name)(_params(*shapes), lr=0.01)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        optimizer.step()
    seen = {event.key for event in trace.key_averages()}
    assert set(operators) <= seen, sorted(seen)


@pytest.mark.slow  # torch.compile's first use takes seconds
def test_an_operator_is_traced_by_torch_compile_without_a_graph_break(kernels):
    """fullgraph=True fails on a graph break; the compiled call gives the eager call's bits."""

    def step(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor) -> None:
        torch.ops.plugtrain.lion_step(p, g, m, 1e-3, 0.999, 0.1, 0.01)

    gen = torch.Generator().manual_seed(0)
    p, g, m = (torch.randn(64, 33, generator=gen) for _ in range(3))
    eager = [p.clone(), m.clone()]
    step(eager[0], g, eager[1])
    compiled = [p.clone(), m.clone()]
    torch.compile(step, fullgraph=True, backend="aot_eager")(compiled[0], g, compiled[1])
    torch._dynamo.reset()
    assert not torch.equal(eager[0], p)
    assert torch.equal(compiled[0], eager[0])
    assert torch.equal(compiled[1], eager[1])


def test_the_kernels_are_built_when_the_optimizer_is_made_not_in_a_step(
    kernels, tmp_path, monkeypatch
):
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(tmp_path))
    _native.reset()
    plugtrain.resolve("optimizer", "AdamW")(_params((4, 5)), lr=0.01)
    assert _native.status() == "not built yet"  # no kernels: nothing built for it
    params = _params((40, 50))
    optimizer = plugtrain.resolve("optimizer", "Lion")(params, lr=0.01)
    assert _native.status().startswith(f"loaded from {tmp_path / 'kernels'}")

    def no_build(*_: object) -> Path:
        raise AssertionError("a step built the kernels")

    monkeypatch.setattr(_native, "_build", no_build)
    before = params[0].detach().clone()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        optimizer.step()
    assert "plugtrain::lion_step" in {event.key for event in trace.key_averages()}
    assert not torch.equal(params[0].detach(), before)


def test_builds_started_at_once_wait_for_one_compilation(kernels, tmp_path, monkeypatch):
    """As the ranks of a run do: one compiles under the cache's lock, the others load its file."""
    log = tmp_path / "compilations"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *-shared*) echo built >> {log}; sleep 0.3;; esac\n'
        f'exec {kernels} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PLUGTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    paths: list[Path] = []

    def build() -> None:
        paths.append(_native._build(str(wrapper), []))

    workers = [threading.Thread(target=build) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(paths) == 3
    assert len(set(paths)) == 1
    assert log.read_text().splitlines() == ["built"]
    leftovers = [p.name for p in paths[0].parent.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


def test_torch_without_gnu_openmp_gets_one_thread_kernels(monkeypatch):
    monkeypatch.setattr(
        torch.__config__, "parallel_info", lambda: "ATen parallel backend: native thread pool"
    )
    assert "not OpenMP" in _native._torch_not_gnu_openmp()
