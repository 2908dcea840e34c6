"""Per-step time of the plugtrain optimizers against their memory floor and every baseline.

Two shapes: ``large`` (25.2M float32 parameters in 4 tensors) and ``many`` (400 tensors of
100x100). For one optimizer and shape, every contestant (plugtrain on its default path; on the
many shape also plugtrain with ``flat=False``, the default before issue 31, and the default
path with a fresh ``.grad`` tensor per parameter before each step, as backward leaves them
after ``zero_grad()``; torch.optim foreach / fused, pytorch-optimizer, lion-pytorch) and a
256 MiB ``Tensor.copy_`` are timed interleaved: one step each, round robin, the order rotating
every round, so that machine noise hits them alike. ``--repeat`` runs that ``--reps`` times
over and gives the spread of the per-repeat medians. Ratios to a baseline are our time / theirs
(issue 31's goals: Lamb and Lion at most 0.67x pytorch-optimizer's).

``in-cache x floor``: the same step on the shape scaled down to fit the last-level cache (every
tensor's rows cut, or fewer tensors) at two sizes, a quarter and all of the cache's budget; the
slope between them (seconds per element, so per-step fixed costs cancel) times the shape's
elements, over the floor: what the arithmetic alone costs. A row whose in-cache figure is
already above its goal is bound by compute here, not by memory.

The floor is the time the copy of the same repeat needs to move the bytes the algorithm must
read and write per step (issue 18's counts of parameter-sized tensors, ``FLOOR``; Lamb and
Adafactor add 3 for tensors whose working set is larger than the last-level cache, since their
norms and means must be known before any element is written).

Torch runs with ``--threads`` intra-op threads (default 2, as issue 31 measured; the copy that
sets the floor runs with the same setting; plugtrain's CPU steps choose between all of them and
one, in cache blocks or not, by their measured step times: ``plugtrain_optimizers._threads``;
``bench/optimizer_plans.py`` times each choice).
With CUDA available the same table is also measured on the GPU (``--devices``).

    python bench/optimizers.py [--reps 7] [--repeat 3] [--only Adam,Lion] [--shapes many]
                               [--threads 1] [--devices cpu,cuda] [--write bench/optimizers.md]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import plugtrain

SHAPES = {
    "large": [(4096, 2048), (4096, 2048), (2048, 2048), (2048, 2048)],
    "many": [(100, 100)] * 400,
}
COPY_BYTES = 256 * 2**20

# Parameter-sized float32 tensors one step must read plus write (issue 18).
FLOOR = {
    "SGD": 5, "ASGD": 4, "Adagrad": 5, "RMSprop": 5, "Lion": 5, "Adam": 7, "AdamW": 7,
    "Adamax": 7, "NAdam": 7, "RAdam": 7, "Rprop": 7, "Adadelta": 7, "Lamb": 7, "Adafactor": 3,
    "Muon": 5,
}  # fmt: skip
NORMS_FIRST = {"Lamb", "Adafactor"}  # +3 per tensor larger than the cache

OURS: dict[str, dict[str, Any]] = {"SGD": {"lr": 0.01, "momentum": 0.9}, "Adafactor": {"lr": 0.01}}
TORCH_ARGS: dict[str, dict[str, Any]] = {"SGD": {"lr": 0.01, "momentum": 0.9}}
TORCH_FUSED = {"Adam", "AdamW", "SGD", "Adagrad"}
THIRD_PARTY: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
    "Lamb": [("pytorch_optimizer", "Lamb", {})],
    "Lion": [("pytorch_optimizer", "Lion", {}), ("lion_pytorch", "Lion", {})],
    "Adafactor": [("pytorch_optimizer", "AdaFactor", {"lr": 0.01})],
    "RAdam": [("pytorch_optimizer", "RAdam", {})],
    "Muon": [("pytorch_optimizer", "Muon", {})],
}


def last_level_cache() -> int:
    """Bytes of the largest CPU cache (sysfs; 32 MiB when unknown)."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    sizes = []
    try:
        for entry in os.listdir(root):
            with open(os.path.join(root, entry, "size"), encoding="ascii") as f:
                text = f.read().strip()
            scale = {"K": 2**10, "M": 2**20}.get(text[-1], 1)
            sizes.append(int(text.rstrip("KM")) * scale)
    except OSError:
        pass
    return max(sizes, default=32 * 2**20)


def floor_bytes(name: str, dims: list[tuple[int, ...]], cache: int) -> int:
    """Bytes one step of ``name`` must move over parameters of shapes ``dims`` (float32)."""
    total = 0
    for shape in dims:
        size = 4 * int(torch.Size(shape).numel())
        count = FLOOR[name]
        if name == "Adafactor" and len(shape) < 2:
            count = 5
        if name in NORMS_FIRST and count * size > cache:
            count += 3
        total += count * size
    return total


def in_cache_dims(shape: str, cache: int, part: int = 1) -> list[tuple[int, ...]]:
    """``SHAPES[shape]`` cut down so that 8 float32 tensors of it fill ``1 / (2 part)`` of
    ``cache``."""
    dims = SHAPES[shape]
    total = sum(int(torch.Size(d).numel()) for d in dims)
    budget = cache // (4 * 8 * 2 * part)
    if len(dims) > 1 and dims[0] == dims[-1] and total // len(dims) <= budget:
        return dims[: max(1, budget * len(dims) // total)]  # fewer of the same tensors
    return [(max(1, d[0] * budget // total), *d[1:]) for d in dims]  # fewer rows of each


def make_params(
    shape: str, device: str, dims: list[tuple[int, ...]] | None = None
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    params = []
    for size in SHAPES[shape] if dims is None else dims:
        p = torch.nn.Parameter((torch.randn(size, generator=gen) * 0.02).to(device))
        p.grad = (torch.randn(size, generator=gen) * 1e-3).to(device)
        params.append(p)
    return params


def bf16_matmul_is_slow(device: str) -> tuple[bool, float, float]:
    """Whether bfloat16 matrix products are over 3x slower than float32 here (GFLOP/s of each)."""
    rates = []
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(512, 1024, device=device).to(dtype)
        x @ x.mT
        sync(device)
        start = time.perf_counter()
        x @ x.mT
        sync(device)
        rates.append(2 * 512 * 512 * 1024 / (time.perf_counter() - start) / 1e9)
    return rates[1] * 3 < rates[0], rates[0], rates[1]


def contestants(name: str, shape: str, device: str) -> dict[str, Callable[[], Any]]:
    """Constructors of every contestant for ``name`` on ``shape``, plugtrain first."""
    ours = plugtrain.resolve("optimizer", name)
    kwargs = OURS.get(name, {})
    found: dict[str, Callable[[], Any]] = {
        "plugtrain": lambda: ours(make_params(shape, device), **kwargs)
    }
    if shape == "many" and name != "Muon":
        found["plugtrain fresh .grad"] = lambda: _FreshGrads(
            ours(make_params(shape, device), **kwargs)
        )
        found["plugtrain flat=False"] = lambda: ours(
            make_params(shape, device), **kwargs, flat=False
        )
    if name == "Muon" and shape == "many":
        found["plugtrain ns_dtype=float32"] = lambda: ours(
            make_params(shape, device), ns_dtype="float32"
        )
    slow_bf16 = name == "Muon" and shape == "large" and bf16_matmul_is_slow(device)[0]
    theirs = getattr(torch.optim, name, None)
    if theirs is not None and not slow_bf16:
        torch_kwargs = {**TORCH_ARGS.get(name, {}), "foreach": True}
        if name == "Muon":
            torch_kwargs.pop("foreach")
        found["torch foreach" if name != "Muon" else "torch"] = lambda: theirs(
            make_params(shape, device), **torch_kwargs
        )
        if name in TORCH_FUSED:
            fused_kwargs = {**TORCH_ARGS.get(name, {}), "fused": True}
            found["torch fused"] = lambda: theirs(make_params(shape, device), **fused_kwargs)
    for module_name, attribute, extra in [] if slow_bf16 else THIRD_PARTY.get(name, []):
        try:
            cls = getattr(importlib.import_module(module_name), attribute)
        except ImportError:
            continue
        found[module_name] = lambda cls=cls, extra=extra: _third_party(cls, shape, device, extra)
    return found


class _FreshGrads:
    """An optimizer whose parameters get a new ``.grad`` tensor before each step (as backward
    allocates them after ``zero_grad()``), so that a flat layout must copy them in."""

    def __init__(self, opt: torch.optim.Optimizer) -> None:
        self.opt = opt
        self.params = [p for g in opt.param_groups for p in g["params"]]
        self.grads = [p.grad.clone() for p in self.params]  # type: ignore[union-attr]

    def step(self) -> None:
        for p, g in zip(self.params, self.grads, strict=True):
            p.grad = g
        self.opt.step()


def _third_party(cls: type, shape: str, device: str, kwargs: dict[str, Any]) -> Any:
    if cls.__name__ == "Muon":  # pytorch-optimizer's Muon wants groups marked use_muon
        return cls([{"params": make_params(shape, device), "use_muon": True}], **kwargs)
    return cls(make_params(shape, device), **kwargs)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(
    actions: dict[str, Callable[[], Any]], reps: int, repeat: int, device: str
) -> dict[str, list[float]]:
    """Per-repeat median seconds of each action, timed round robin with a rotating order."""
    labels = list(actions)
    for action in actions.values():
        action()  # warm-up: lazy buffers, first-step branches
    sync(device)
    medians: dict[str, list[float]] = {label: [] for label in labels}
    for _ in range(repeat):
        times: dict[str, list[float]] = {label: [] for label in labels}
        for r in range(reps):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                start = time.perf_counter()
                actions[label]()
                sync(device)
                times[label].append(time.perf_counter() - start)
        for label in labels:
            medians[label].append(statistics.median(times[label]))
    return medians


def spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    """``median`` or ``median (min-max)`` of ``values`` times ``scale``."""
    mid = statistics.median(values) * scale
    if len(values) == 1:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} ({min(values) * scale:.{digits}f}-{max(values) * scale:.{digits}f})"


def measure(name: str, shape: str, device: str, args: argparse.Namespace, cache: int) -> str:
    """One table row: ours, x floor and every baseline, from one interleaved run."""
    built = {label: make() for label, make in contestants(name, shape, device).items()}
    src = torch.randn(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    actions: dict[str, Callable[[], Any]] = {"copy": lambda: dst.copy_(src)}
    actions.update({label: opt.step for label, opt in built.items()})
    reps = 2 if name == "Muon" and shape == "large" else args.reps
    repeat = 1 if name == "Muon" and shape == "large" else args.repeat
    sizes: dict[str, int] = {}
    small = []
    if name != "Muon":
        for part in (4, 1):
            dims = in_cache_dims(shape, cache, part)
            opt = plugtrain.resolve("optimizer", name)(
                make_params(shape, device, dims), **OURS.get(name, {})
            )
            small.append(opt)
            actions[f"in cache {part}"] = opt.step
            sizes[f"in cache {part}"] = sum(int(torch.Size(d).numel()) for d in dims)
    medians = interleaved(actions, reps, repeat, device)
    del built
    moved = floor_bytes(name, SHAPES[shape], cache)
    # floor of one repeat = bytes / (copy's read + write bytes per second in that repeat)
    floors = [moved * t / (2 * COPY_BYTES) for t in medians["copy"]]
    ours = medians["plugtrain"]
    x_floor = [t / f for t, f in zip(ours, floors, strict=True)]
    in_cache = "-"
    if sizes:
        elements = sum(int(torch.Size(d).numel()) for d in SHAPES[shape])
        quarter, whole = medians.pop("in cache 4"), medians.pop("in cache 1")
        per_element = [
            (b - a) / (sizes["in cache 1"] - sizes["in cache 4"])
            for a, b in zip(quarter, whole, strict=True)
        ]
        ratios = [e * elements / f for e, f in zip(per_element, floors, strict=True)]
        in_cache = spread(ratios, digits=2)
    variants = []
    for label in ("plugtrain fresh .grad", "plugtrain flat=False"):
        if label in medians:
            times = medians.pop(label)
            ratios = [t / f for t, f in zip(times, floors, strict=True)]
            variants.append(f"{label.removeprefix('plugtrain ')} {spread(ratios, digits=2)}")
    others = []
    for label, times in medians.items():
        if label in ("copy", "plugtrain"):
            continue
        ratios = [o / t for t, o in zip(times, ours, strict=True)]
        others.append(f"{label} {spread(times, 1e3)} ({spread(ratios, digits=2)}x)")
    if name == "Muon" and shape == "large" and bf16_matmul_is_slow(device)[0]:
        _, f32, bf16 = bf16_matmul_is_slow(device)
        others.append(
            f"torch, pytorch_optimizer not run: their bfloat16 matmuls run at {bf16:.1f} GFLOP/s"
            f" here (float32: {f32:.1f}), over {1.4e3 / bf16 / 60:.0f} min a step"
        )
    return (
        f"| {device} | {shape} | {name} | {spread(ours, 1e3)} | {spread(floors, 1e3)} | "
        f"{spread(x_floor, digits=2)} | {in_cache} | {'; '.join(variants) or '-'} | "
        f"{'; '.join(others) or '-'} |"
    )


def in_cache_row(name: str, shape: str, device: str, cache: int, rounds: int = 5) -> str:
    """The arithmetic alone against the floor, from best times (robust to a busy machine).

    The step at a quarter and at all of the in-cache budget and the 256 MiB copy, each timed
    ``rounds`` times 5 steps interleaved; the slope between the two best step times, per
    element, times the shape's elements, over the floor at the best copy time.
    """
    cls = plugtrain.resolve("optimizer", name)
    opts, sizes = [], []
    for part in (4, 1):
        dims = in_cache_dims(shape, cache, part)
        opts.append(cls(make_params(shape, device, dims), **OURS.get(name, {})))
        sizes.append(sum(int(torch.Size(d).numel()) for d in dims))
    src = torch.randn(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    actions = [lambda: dst.copy_(src), opts[0].step, opts[1].step]
    best = [float("inf")] * 3
    for action in actions:
        action()
    for _ in range(rounds):
        for i, action in enumerate(actions):
            for _ in range(5):
                start = time.perf_counter()
                action()
                sync(device)
                best[i] = min(best[i], time.perf_counter() - start)
    elements = sum(int(torch.Size(d).numel()) for d in SHAPES[shape])
    floor = floor_bytes(name, SHAPES[shape], cache) * best[0] / (2 * COPY_BYTES)
    arithmetic = (best[2] - best[1]) / (sizes[1] - sizes[0]) * elements
    ratio = arithmetic / floor
    return f"| {shape} | {name} | {arithmetic * 1e3:.1f} | {floor * 1e3:.1f} | {ratio:.2f} |"


def op_costs() -> str:
    """What bounds the rows that miss: op dispatch, in-cache passes, per-tensor overhead."""

    def best(action: Callable[[], Any], times: int) -> float:
        action()
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(times):
                action()
            runs.append((time.perf_counter() - start) / times)
        return min(runs)

    src = torch.randn(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    dram = best(lambda: dst.copy_(src), 3) / (2 * src.numel())  # s per float32 read or written
    x, y, out = torch.rand(2**19) + 0.5, torch.rand(2**19) + 0.5, torch.empty(2**19)
    tiny = torch.zeros(1)
    dispatch = best(lambda: tiny.add_(1.0), 2000)
    costs = {
        "add": best(lambda: torch.add(x, y, out=out), 50) / x.numel(),
        "sqrt": best(lambda: torch.sqrt(x, out=out), 50) / x.numel(),
        "sign": best(lambda: torch.sign(x, out=out), 50) / x.numel(),
        "lerp": best(lambda: torch.lerp(x, y, 0.1, out=out), 50) / x.numel(),
    }
    small = [torch.randn(100, 100) for _ in range(400)]
    small_other = [torch.randn(100, 100) for _ in range(400)]
    flat, flat_other = torch.randn(400 * 10_000), torch.randn(400 * 10_000)
    per_list = best(lambda: torch._foreach_add_(small, small_other), 10)
    one = best(lambda: flat.add_(flat_other), 10)
    in_cache = ", ".join(f"{k} {v / dram:.2f}" for k, v in costs.items())
    return (
        f"floor: one float32 read or written by the 256 MiB copy in {dram * 1e9:.2f} ns. "
        f"One op on a 512K-element block in cache, in floor tensor-passes (3-operand op = 3 "
        f"passes at the floor): {in_cache}. Dispatch of one op: {dispatch * 1e6:.1f} us. "
        f"foreach add over 400 tensors of 100x100: {per_list * 1e3:.2f} ms, one add over the "
        f"same 4M elements in one buffer: {one * 1e3:.2f} ms "
        f"({(per_list - one) / 400 * 1e6:.1f} us more per tensor)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=7, help="interleaved rounds per repeat")
    parser.add_argument("--repeat", type=int, default=3, help="independent repeats (spread)")
    parser.add_argument("--only", nargs="*", default=[], help="optimizer names")
    parser.add_argument("--shapes", default="large,many")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    default_devices = "cpu,cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--devices", default=default_devices)
    parser.add_argument("--write", default="")
    parser.add_argument("--op-costs", action="store_true", help="only print what bounds a step")
    parser.add_argument(
        "--in-cache", action="store_true", help="only the arithmetic alone (in cache) vs the floor"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.op_costs:
        print(op_costs())
        return
    only = [n for arg in args.only for n in arg.split(",") if n]
    names = only or plugtrain.names("optimizer")
    cache = last_level_cache()
    if args.in_cache:
        print("| shape | optimizer | arithmetic ms (in cache, scaled) | floor ms | ratio |")
        print("|---|---|---|---|---|")
        for shape in args.shapes.split(","):
            for name in names:
                if name != "Muon":
                    print(in_cache_row(name, shape, "cpu", cache), flush=True)
        return
    load = os.getloadavg()[0]
    rows = []
    for device in args.devices.split(","):
        for shape in args.shapes.split(","):
            for name in names:
                rows.append(measure(name, shape, device, args, cache))
                print(rows[-1], flush=True)
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{cache // 2**20} MiB last-level cache, torch {torch.__version__} "
        f"({torch.get_num_threads()} thread(s))"
    )
    if torch.cuda.is_available():
        machine += f", GPU {torch.cuda.get_device_name()}"
    table = "\n".join(
        [
            f"Machine: {machine}; load average before the run {load:.1f}. "
            f"Median of {args.reps} interleaved steps per repeat; median (min-max) over "
            f"{args.repeat} repeats; (Nx) = our time / theirs; floor = the bytes of `FLOOR` at "
            "the speed of a 256 MiB `Tensor.copy_` timed in the same rounds; in-cache x floor: "
            "the step on a shape scaled to fit the cache, per element, over the floor.",
            "",
            "| device | shape | optimizer | plugtrain ms/step | floor ms | x floor | "
            "in-cache x floor | other paths x floor | others: ms/step (our time / theirs) |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as out:
            out.write("# Optimizer benchmark (`bench/optimizers.py`)\n\n" + table + "\n")


if __name__ == "__main__":
    main()
