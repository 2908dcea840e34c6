"""From a Hugging Face folder to the first step and the first token, against reading the folder.

Writes a Llama folder of random bfloat16 weights with transformers into a temporary folder
(sharded safetensors and their index; nothing is downloaded): ``--size 1b`` is shaped like
Llama 3.2 1B (1.24 B parameters, tied embeddings), ``100m`` and ``10m`` are quicker. Then runs,
each in a fresh process and interleaved ``--rounds`` times:

- ``imports``: ``import torch``, plugtrain's generation and LoRA modules and every plugin's
  registration: the process's own memory, before any weight;
- ``read``: ``import torch``, then every tensor of the folder read into memory with
  safetensors (``safetensors.torch.load`` of each shard's bytes): the floor a loader cannot
  beat;
- ``read float32``: the same, each tensor then converted to float32 (the model's type): the
  least a float32 model's load costs;
- ``fit``: ``plugtrain fit RUN.yaml`` starting from the folder (``ckpt_path``), LoRA r 8 on
  the attention projections, AdamW, one step of 1 x 32 byte-level tokens (``StdlibText``), in
  an empty ``model_dir``: from the command's start to the first step's end (the time its
  metrics record, ``metrics.jsonl``); ``exit`` also counts the checkpoint every fit writes at
  its end, and ``step`` is the step's own seconds (its data, forward, backward and update:
  ``1 / steps_per_second``);
- ``fit (bf16 LoRA)``: the same fit under ``precision: {fp16_type: bfloat16}``: its frozen
  Linear weights are read from the folder in bfloat16 and held so (the embedding, tied to the
  head, and the norms in float32); ``fit (bf16 LoRA, f32 base)`` the same with
  ``PLUGTRAIN_BF16_BASE=0``: the base in float32, as the model is built (the same steps);
- ``generate``: ``plugtrain generate RUN.yaml --ckpt FOLDER --max-tokens 1``: to the first
  token (the command's exit);
- ``fit (old)`` and ``generate (old)``: the same with ``PLUGTRAIN_META_BUILD=0``, the model
  built whole and initialised before the folder is loaded over it (``--no-old`` skips them);
- ``fit (baseline)`` and ``generate (baseline)``, with ``--baseline DIR``: the same run by
  another copy of plugtrain's sources (``DIR/core`` and ``DIR/plugins/*/src`` first on
  ``PYTHONPATH``; ``git archive REV core plugins | tar -x -C DIR`` makes one).

Printed: each process's time, CPU seconds (user and system, to the first step's end and to
the exit: steadier than the time on a loaded machine, but a process waiting on the disk or on
memory it is given counts less) and
peak RSS (``ru_maxrss``), the ratio of each time to ``read``'s, the same without ``fit``'s
step (``- step``: what loading costs beyond the step),
and of each peak to the model's bytes (the float32 weights plugtrain holds: 4 bytes a
parameter), with and without ``imports``' peak, and the load average; for the bf16 LoRA rows,
the peak beside the bytes that model holds (2 bytes a frozen Linear parameter, 4 the others).
Goals: ``fit`` (to the first step's end) and ``generate`` at most 1.5x ``read``'s time, peak
RSS at most 1.15x the model's bytes.

    python bench/startup_from_hf.py [--size 1b] [--rounds 1] [--no-old] [--baseline DIR]
        [--only LABEL [--only LABEL ...]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES: dict[str, dict[str, Any]] = {
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256},
    "100m": {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 8,
             "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 32000},
    "10m": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 8000},
}  # fmt: skip
LORA = {"r": 8, "alpha": 16, "target_modules": ["MultiQueryAttention", "Linear"]}
READ = """
import sys, pathlib, torch
from safetensors.torch import load
tensors = [load(pathlib.Path(f).read_bytes()) for f in sys.argv[1:]]
print(sum(t.numel() for shard in tensors for t in shard.values()))
"""
READ32 = """
import sys, pathlib, torch
from safetensors.torch import load
tensors = [
    {n: t.float() for n, t in load(pathlib.Path(f).read_bytes()).items()} for f in sys.argv[1:]
]
print(sum(t.numel() for shard in tensors for t in shard.values()))
"""
IMPORTS = """
import torch, plugtrain_models.generation, plugtrain_models.lora
from plugtrain.discovery.loading import get_registry
get_registry()
"""


def write_folder(folder: Path, size: str) -> None:
    """A random bfloat16 Llama folder of ``size``, sharded, written by transformers."""
    import torch
    import transformers

    config = transformers.LlamaConfig(
        **SIZES[size], max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=1, torch_dtype="bfloat16",
    )  # fmt: skip
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives the tied head storage of its own
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.fill_(1.0)
            else:
                parameter.uniform_(-0.03, 0.03, generator=generator)
    model.save_pretrained(folder, max_shard_size="500MB", safe_serialization=True)


def run_file(folder: Path, work: Path, precision: str | None = None) -> Path:
    """The run file fitting and generating from ``folder`` (its model keys from config.json).

    :param precision: ``fp16_type`` of ``precision`` (none: float32).
    """
    import yaml

    from plugtrain.conversion import open_checkpoint
    from plugtrain.discovery.loading import get_registry

    opened = open_checkpoint(folder, get_registry())
    init = {
        "backend": {"backend_type": "CPU"},
        "model_dir": str(work / "model_dir"),
        "seed": 0,
        "model": {"name": opened.model_name, **opened.model_keys},
        "optimizer": {"AdamW": {"lr": 1e-4}},
        "loop": {"max_steps": 1},
        "checkpoint": {"steps": None},
        "callbacks": [{"Lora": {"lora_params": LORA}}],
    }
    if precision is not None:
        init["precision"] = {"fp16_type": precision}
    loader = {"StdlibText": {"batch_size": 1, "block_size": 32, "max_bytes": 100_000}}
    fit = {"train_dataloader": loader, "ckpt_path": str(folder)}
    path = work / f"run{'_' + precision if precision else ''}.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"init": init, "fit": fit}}, sort_keys=False))
    return path


def measure(command: list[str], env: dict[str, str], model_dir: Path) -> dict[str, float]:
    """One fresh process running ``command``: its seconds, CPU seconds, peak RSS bytes.

    ``model_dir`` is emptied first (a fit would resume from a checkpoint left there). When
    the command leaves a step there, ``first`` is the seconds from the start to that step's
    end, ``cpu first`` the CPU seconds until its metrics appeared (polled), and ``step`` the
    step's own seconds; otherwise ``first`` is the time to the exit.
    """
    shutil.rmtree(model_dir, ignore_errors=True)
    metrics = model_dir / "metrics.jsonl"
    began = time.time()
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu_first = peak_first = math.nan
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if math.isnan(cpu_first) and metrics.is_file() and metrics.stat().st_size:
            cpu_first = _cpu_seconds(process.pid)  # the file is made empty at the start
            peak_first = _peak_bytes(process.pid)
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        error = process.stderr.read().decode() if process.stderr else ""
        raise SystemExit(f"{' '.join(command)} failed:\n{error[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    measured = {"exit": seconds, "first": seconds, "cpu": cpu, "cpu first": cpu}
    measured["peak"] = usage.ru_maxrss * 1024.0
    if metrics.is_file():
        first = json.loads(metrics.read_text().splitlines()[0])
        measured["first"] = first["time"] - began
        measured["step"] = 1 / first["steps_per_second"]
        measured["cpu first"] = cpu_first
        measured["peak first"] = peak_first
    return measured


def _cpu_seconds(pid: int) -> float:
    """The user and system seconds process ``pid`` has used so far (``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_bytes(pid: int) -> float:
    """The most resident memory process ``pid`` has had so far (``VmHWM``), in bytes."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return math.nan
    found = [line.split()[1] for line in lines if line.startswith("VmHWM:")]
    return float(found[0]) * 1024 if found else math.nan


def sources(root: Path) -> list[str]:
    """The import roots of a copy of plugtrain's sources: ``core`` and each plugin's ``src``."""
    found = [root / "core", *sorted(root.glob("plugins/*/src"))]
    if not (root / "core" / "plugtrain").is_dir():
        raise SystemExit(f"--baseline {root}: no core/plugtrain there")
    return [str(path.resolve()) for path in found]


def tensor_sizes(folder: Path) -> dict[str, int]:
    """Each tensor of the folder and its number of elements, from the safetensors headers."""
    sizes: dict[str, int] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with shard.open("rb") as handle:
            header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        header.pop("__metadata__", None)
        sizes.update((name, math.prod(entry["shape"])) for name, entry in header.items())
    return sizes


def model_parameters(folder: Path) -> int:
    """The parameters of the folder's tensors, from the safetensors headers alone."""
    return sum(tensor_sizes(folder).values())


def _variants(args: argparse.Namespace, env: dict[str, str]) -> list[tuple[str, str, Any]]:
    """Each row to run: the command's name, the label's suffix and the environment."""
    names = ("imports", "read", "read float32", "fit", "fit (bf16 LoRA)", "generate")
    variants = [(n, "", env) for n in names]
    wide = {**env, "PLUGTRAIN_BF16_BASE": "0"}
    variants.insert(5, ("fit (bf16 LoRA)", ", f32 base", wide))
    if not args.no_old:
        old = {**env, "PLUGTRAIN_META_BUILD": "0"}
        variants += [("fit", " (old)", old), ("generate", " (old)", old)]
    if args.baseline:
        base = {**env, "PYTHONPATH": os.pathsep.join(sources(Path(args.baseline)))}
        variants += [("fit", " (baseline)", base), ("generate", " (baseline)", base)]
    if args.only:
        wanted = {*args.only, "read", "imports"}
        variants = [v for v in variants if _label(*v[:2]) in wanted]
    return variants


def held_bytes(folder: Path) -> int:
    """The bytes a bf16 LoRA fit's model holds: its frozen Linear weights in bfloat16 (2 bytes a
    parameter), the token table (tied to the head) and the norms in float32 (4)."""
    return sum(
        (4 if "embed" in name or "norm" in name else 2) * count
        for name, count in tensor_sizes(folder).items()
    )


def main() -> None:
    """Write the folder, run every variant interleaved, print the table (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-old", action="store_true", help="skip the initialised builds")
    parser.add_argument("--baseline", metavar="DIR", help="sources to compare with (see above)")
    parser.add_argument("--only", metavar="LABEL", action="append", help="a row to run (repeat)")
    parser.add_argument("--write", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_folder(Path(args.write), args.size)
        return
    plugtrain = [sys.executable, "-m", "plugtrain"]
    with tempfile.TemporaryDirectory(prefix="startup_from_hf-") as temporary:
        work = Path(temporary)
        folder = work / "llama"
        started = time.perf_counter()
        # in a process of its own: a child's peak RSS starts at its parent's (fork copies it)
        command = [sys.executable, __file__, "--size", args.size, "--write", str(folder)]
        subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
        shards = sorted(str(p) for p in folder.glob("*.safetensors"))
        print(f"wrote {len(shards)} shards in {time.perf_counter() - started:.0f} s")
        run = str(run_file(folder, work))
        run_bf16 = str(run_file(folder, work, "bfloat16"))
        generate = [*plugtrain, "generate", run, "--ckpt", str(folder), "--prompt", "ab"]
        generate += ["--max-tokens", "1", "--tokenizer", "bytes"]
        commands = {
            "imports": [sys.executable, "-c", IMPORTS],
            "read": [sys.executable, "-c", READ, *shards],
            "read float32": [sys.executable, "-c", READ32, *shards],
            "fit": [*plugtrain, "fit", run],
            "fit (bf16 LoRA)": [*plugtrain, "fit", run_bf16],
            "generate": generate,
        }
        # the optimizer's C kernels are built once per machine and its step tuner times plans
        # in the first steps: neither is what loading costs
        env = {**os.environ, "OMP_NUM_THREADS": "2", "PLUGTRAIN_META_BUILD": "1"}
        env["PLUGTRAIN_NATIVE_KERNELS"] = "0"
        variants = _variants(args, env)
        results: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.rounds):
            for name, suffix, variant_env in variants:
                label = _label(name, suffix)
                measured = measure(commands[name], variant_env, work / "model_dir")
                results.setdefault(label, []).append(measured)
                shown = ", ".join(f"{k} {v:.1f} s" for k, v in measured.items() if "peak" not in k)
                peaks = ", ".join(
                    f"{k} {v / 2**30:.2f} GiB" for k, v in measured.items() if "peak" in k
                )
                print(f"  {label}: {shown}, {peaks}", flush=True)
        parameters = model_parameters(folder)
        file_bytes = sum(Path(s).stat().st_size for s in shards)
        held = held_bytes(folder)
    model_bytes = 4 * parameters
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(
        f"{args.size}: {parameters / 1e9:.3f} B parameters; folder {file_bytes / 2**30:.2f} GiB "
        f"(bfloat16), model {model_bytes / 2**30:.2f} GiB (float32); {args.rounds} round(s)"
    )
    print_table(results, model_bytes)
    print_held(results, held)
    print(json.dumps(results))


def print_held(results: dict[str, list[dict[str, float]]], held: int) -> None:
    """The bf16 LoRA fit's peaks (to its first step's end, to its exit) and its model's bytes."""
    label = "fit (bf16 LoRA)"
    if label not in results:
        return
    for key in ("peak first", "peak"):
        peak = statistics.median(run[key] for run in results[label])
        print(
            f"{label}: {key} {peak / 2**30:.2f} GiB = {peak / held:.2f}x the {held / 2**30:.2f} "
            "GiB its model holds (bfloat16 frozen Linear weights, float32 table and norms)"
        )


def _label(name: str, suffix: str) -> str:
    """A row's label: ``fit (old)``, ``fit (bf16 LoRA, f32 base)``."""
    if suffix.startswith(",") and name.endswith(")"):
        return f"{name[:-1]}{suffix})"
    return name + suffix


def print_table(results: dict[str, list[dict[str, float]]], model_bytes: int) -> None:
    """The medians of every variant, as ratios to ``read`` and to the model's bytes."""

    def median(label: str, key: str) -> float:
        values = [run[key] for run in results[label] if key in run]
        return statistics.median(values) if values else math.nan

    read_s = median("read", "first")
    floor = median("imports", "peak")
    heads = ("seconds", "/ read", "exit s", "step s", "- step", "cpu s", "/ read", "cpu exit")
    heads += ("peak GiB", "/ model", "- imports")
    print(f"{'':20}" + "".join(f"{h:>10}" for h in heads))
    for label in results:
        seconds, step, peak = median(label, "first"), median(label, "step"), median(label, "peak")
        cpu = median(label, "cpu first")
        row = (
            f"{seconds:10.1f}{seconds / read_s:10.2f}{median(label, 'exit'):10.1f}{step:10.1f}"
            f"{(seconds - (0 if math.isnan(step) else step)) / read_s:10.2f}"
            f"{cpu:10.1f}{cpu / median('read', 'cpu'):10.2f}{median(label, 'cpu'):10.1f}"
            f"{peak / 2**30:10.2f}{peak / model_bytes:10.2f}{(peak - floor) / model_bytes:10.2f}"
        )
        print(f"{label:20}{row}")


if __name__ == "__main__":
    main()
