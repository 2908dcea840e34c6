"""How fast plugtrain finds plugins and resolves names.

1. Cold start: ``python -m plugtrain list`` (its rows cached by an earlier call, as a user's
   second listing finds them, and with ``PLUGTRAIN_NO_CACHE=1``: every plugin loaded) vs
   ``python -c "import torch"`` vs ``python -c pass``, interleaved, medians and ratios.
2. Discovery cost with N extra installed plugin distributions (synthetic dist-info folders with
   a ``plugtrain`` entry point each, in a temporary directory put on PYTHONPATH), uncached and
   cached.
3. Warm ``plugtrain.resolve()``.

Run: ``python bench/discovery.py [--repeats 7] [--sizes 0 100 250 500]``
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

PLUGIN_MODULE = '''
import attrs
from plugtrain import hookimpl
from plugtrain.schema import arg


@attrs.frozen
class Args:
    """Synthetic optimizer {i}."""

    lr: float = arg(0.1, ge=0)


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("Synthetic{i}", "synthetic_plugin_{i}:Optimizer", schema=Args)
'''


def make_plugins(root: Path, count: int) -> None:
    """Write ``count`` installed-looking distributions with one plugtrain entry point each."""
    for i in range(count):
        (root / f"synthetic_plugin_{i}.py").write_text(PLUGIN_MODULE.format(i=i))
        info = root / f"synthetic_plugin_{i}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: synthetic-plugin-{i}\nVersion: 1.0\n"
        )
        (info / "entry_points.txt").write_text(
            f"[plugtrain]\nsynthetic{i} = synthetic_plugin_{i}\n"
        )
        (info / "RECORD").write_text("")


def listing_env(cache: str, *, cached: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a ``plugtrain list`` run: its own cache folder, or no cache."""
    env = {**os.environ, "PLUGTRAIN_CACHE_DIR": cache, **extra}
    if not cached:
        env["PLUGTRAIN_NO_CACHE"] = "1"
    return env


def time_command(command: list[str], env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``command``."""
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def cold_start(repeats: int, cache: str) -> None:
    """Interleave the commands ``repeats`` times and print medians and ratios."""
    listing = [sys.executable, "-m", "plugtrain", "list"]
    commands = {
        "python -c pass": ([sys.executable, "-c", "pass"], None),
        "python -c 'import torch'": ([sys.executable, "-c", "import torch"], None),
        "plugtrain list": (listing, listing_env(cache)),
        "plugtrain list (PLUGTRAIN_NO_CACHE=1)": (listing, listing_env(cache, cached=False)),
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for command, env in commands.values():  # warm the page cache (and fill the listing's)
        time_command(command, env)
    for _ in range(repeats):
        for name, (command, env) in commands.items():
            samples[name].append(time_command(command, env))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    torch_time = medians["python -c 'import torch'"]
    print(f"\n## Cold start (median of {repeats}, interleaved)\n")
    print("| command | median s | x import torch |")
    print("|---|---|---|")
    for name, median in medians.items():
        print(f"| `{name}` | {median:.3f} | {median / torch_time:.3f} |")


def discovery(sizes: list[int], repeats: int) -> None:
    """Time ``plugtrain list`` with N extra installed plugins."""
    print(f"\n## `plugtrain list` with N extra plugin distributions (median of {repeats})\n")
    print("| N | uncached median s | s per 100 plugins over N=0 | cached median s |")
    print("|---|---|---|---|")
    base = None
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as cache:
            make_plugins(Path(tmp), size)
            command = [sys.executable, "-m", "plugtrain", "list"]
            medians = []
            for cached in (False, True):
                env = listing_env(cache, cached=cached, PYTHONPATH=tmp)
                time_command(command, env)
                medians.append(
                    statistics.median(time_command(command, env) for _ in range(repeats))
                )
        median, hit = medians
        if base is None:
            base = median
        per_100 = (median - base) / size * 100 if size else 0.0
        print(f"| {size} | {median:.3f} | {per_100:.3f} | {hit:.3f} |")


def warm_resolve() -> None:
    """Time a warm ``plugtrain.resolve`` and ``plugtrain.names``."""
    import plugtrain

    plugtrain.resolve("model", "MLP")
    number = 200_000
    seconds = timeit.timeit(lambda: plugtrain.resolve("model", "MLP"), number=number)
    names = timeit.timeit(lambda: plugtrain.names("model"), number=20_000)
    print("\n## Warm look-ups\n")
    print(f"- `plugtrain.resolve('model', 'MLP')`: {seconds / number * 1e6:.2f} us")
    print(f"- `plugtrain.names('model')`: {names / 20_000 * 1e6:.2f} us")


def main() -> None:
    """Run the three measurements and print Markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 100, 250, 500])
    args = parser.parse_args()
    print(
        f"# Discovery benchmark\n\n{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as cache:
        cold_start(args.repeats, cache)
    discovery(args.sizes, args.repeats)
    warm_resolve()


if __name__ == "__main__":
    main()
