"""``plugtrain preprocess --config`` throughput beside a plain ``tokenizers`` batch encode.

    python bench/preprocess_throughput.py [--records 4000] [--reps 3]

Both sides tokenize the same text: records cut from the running Python's standard-library
source (prompt: a chunk's first half, completion: its second half), with a byte-level BPE
tokenizer trained here on that text (vocabulary 8000, no download). Baseline: one
``Tokenizer.encode_batch`` of each record's full text (prompt + sep + completion + EOS), offsets
on (as ``encode_batch`` always computes them), the fastest a tokenizer alone goes (it runs on
every core); beside it the same call on one thread, for scale, and the floor of any exact
run: that call on one thread plus reading each token's id and offsets into arrays and deflating
the padded samples at h5py's gzip level (what every run must do). plugtrain: the whole
preprocessing run from the YAML file (reading JSON lines, read hook, encoding with offsets,
loss masks, padding, HDF5 writing, ``data_params.json``), as prompt/completion, as chats
rendered with a Jinja template, and with ``use_ftfy: true`` (Model Zoo's default), each with
``setup.processes`` 1 and 2. Tokens per second are the baseline's token count over each side's
wall time: the median of ``--reps`` rounds, the sides interleaved in each round, each side a
fresh process (as a user runs ``plugtrain preprocess``; the time counted starts after the
imports and the tokenizer's loading for the baseline, with ``run_config`` for plugtrain). The CPU
seconds (all threads, worker processes included) say what each side costs whatever else the
machine runs; the last column compares them with one-thread ``encode_batch``'s. The files of
1 and 2 processes are compared byte for byte (``data_params.json`` less the ``processes`` and
``output_dir`` it records); the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

SEP, EOS, BOS = "<|sep|>", "<|end_of_text|>", "<|begin_of_text|>"
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>{{ message['content'] }}<|eot_id|>{% endfor %}"
)
CONFIG = """\
setup:
  data: {{type: local, source: {source}}}
  output_dir: {output}
  mode: finetuning
  processes: {processes}
processing:
  huggingface_tokenizer: {tokenizer}
  max_seq_length: 1024
  use_ftfy: {ftfy}
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:{hook}"
  read_hook_kwargs: {kwargs}
dataset: {{sep_token: "{sep}"}}
"""


def _texts(records: int, chunk: int = 1200) -> list[tuple[str, str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "".join(p.read_text("utf-8", errors="ignore") for p in sorted(stdlib.glob("*.py")))
    pieces = [text[i : i + chunk] for i in range(0, records * chunk, chunk)]
    return [(p[: chunk // 2], p[chunk // 2 :]) for p in pieces if len(p) == chunk]


def _tokenizer(folder: Path, pairs: list[tuple[str, str]]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = [BOS, EOS, SEP, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=8000,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((p + c for p, c in pairs), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def _write_records(root: Path, pairs: list[tuple[str, str]]) -> None:
    """``pairs/data.jsonl`` (prompt, completion) and ``chats/data.jsonl`` (user, assistant)."""
    (root / "pairs").mkdir()
    (root / "chats").mkdir()
    with (root / "pairs" / "data.jsonl").open("w", encoding="utf-8") as file:
        for prompt, completion in pairs:
            file.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    with (root / "chats" / "data.jsonl").open("w", encoding="utf-8") as file:
        for prompt, completion in pairs:
            turns = [{"role": "user", "content": prompt}]
            turns.append({"role": "assistant", "content": completion})
            file.write(json.dumps({"messages": turns}) + "\n")


def _cpu() -> float:
    """CPU seconds of this process and of its ended children (the worker processes)."""
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _pair_texts(root: Path) -> list[str]:
    """Each prompt/completion record's full text, as the baseline tokenizes it."""
    records = map(json.loads, (root / "pairs" / "data.jsonl").read_text("utf-8").splitlines())
    return [r["prompt"] + SEP + r["completion"] + EOS for r in records]


def _deflate_padded(encodings: list[Any], msl: int = 1024) -> None:
    """The floor's work after tokenizing: ids and offsets to arrays, samples padded, deflated."""
    ids = [e.ids for e in encodings]
    count = sum(len(i) for i in ids)
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=count)
    offsets = itertools.chain.from_iterable(e.offsets for e in encodings)
    np.fromiter(itertools.chain.from_iterable(offsets), dtype=np.int64, count=2 * count)
    rows = np.zeros((3, msl), dtype=np.int32)
    at = 0
    for tokens in ids:
        n = min(len(tokens), msl + 1) - 1
        rows[0, :] = rows[2, :] = 0
        rows[0, :n] = flat[at : at + n]
        rows[2, :n] = flat[at + 1 : at + n + 1]
        zlib.compress(rows, 4)  # h5py's gzip level
        at += len(tokens)


def _side(kind: str, root: Path, config: str | None) -> tuple[int, float, float]:
    """Tokens, seconds and CPU seconds of one side, run in this (fresh) process.

    ``threads``: ``encode_batch`` as users call it (every core); ``one``: on one thread;
    ``floor``: one thread plus :func:`_deflate_padded`; ``run``: ``config`` preprocessed.
    """
    if kind == "run":
        from plugtrain_models.data.config_run import run_config

        start, cpu = time.perf_counter(), _cpu()
        run_config(str(config), io.StringIO(), io.StringIO())
        return 0, time.perf_counter() - start, _cpu() - cpu
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(root / "tokenizer" / "tokenizer.json"))
    texts = _pair_texts(root)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if kind == "threads" else "false"
    start, cpu = time.perf_counter(), _cpu()
    encodings = tokenizer.encode_batch(texts)
    if kind == "floor":
        _deflate_padded(encodings)
    return sum(len(e.ids) for e in encodings), time.perf_counter() - start, _cpu() - cpu


def _fresh(kind: str, root: Path, config: Path | None = None) -> tuple[int, float, float]:
    """:func:`_side` in a new process, as a user runs it."""
    command = [sys.executable, __file__, "--side", kind, "--root", str(root)]
    if config is not None:
        command += ["--config", str(config)]
    tokens, seconds, cpu = subprocess.run(
        command, check=True, capture_output=True, text=True
    ).stdout.split()
    return int(tokens), float(seconds), float(cpu)


def _plugtrain(
    root: Path, name: str, run: tuple[str, str, str, bool, int]
) -> tuple[float, float, Path]:
    """One preprocessing run's seconds and CPU seconds, and the folder it wrote."""
    _label, hook, kwargs, ftfy, processes = run
    config = root / f"{name}.yaml"
    output = root / f"out_{name}"
    text = CONFIG.format(
        source=root / ("chats" if "chat" in hook else "pairs"),
        output=output,
        processes=processes,
        tokenizer=root / "tokenizer",
        ftfy=str(ftfy).lower(),
        hook=hook,
        kwargs=kwargs,
        sep=SEP,
    )
    config.write_text(text, encoding="utf-8")
    _tokens, seconds, cpu = _fresh("run", root, config)
    return seconds, cpu, output


def _contents(folder: Path) -> dict[str, bytes]:
    """The folder's files' bytes; ``data_params.json`` less the setup entries that differ."""
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    params = json.loads(files["data_params.json"])
    params["setup"].pop("processes")
    params["setup"].pop("output_dir")
    files["data_params.json"] = json.dumps(params, sort_keys=True).encode()
    return files


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _table(
    names: list[str], seconds: list[list[float]], cpus: list[list[float]], tokens: int
) -> None:
    """The medians as a table: each side beside encode_batch on every core and on one thread."""
    wall = [statistics.median(s) for s in seconds]
    cpu = [statistics.median(c) for c in cpus]
    print("| side | seconds | tokens/s | / encode_batch | / one thread | CPU seconds | tokens "
          "per CPU second / encode_batch's | / one thread's |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, took, used in zip(names, wall, cpu, strict=True):
        print(f"| {name} | {took:.2f} | {tokens / took:,.0f} | {wall[0] / took:.2f} | "
              f"{wall[1] / took:.2f} | {used:.2f} | {cpu[0] / used:.2f} | "
              f"{cpu[1] / used:.2f} |")  # fmt: skip


def main() -> None:
    """Run the sides, interleaved, and print tokens/s, the ratios and the byte check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one side, in a fresh process
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(*_side(args.side, Path(args.root), args.config))
        return
    pairs = _texts(args.records)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        _tokenizer(root / "tokenizer", pairs)
        _write_records(root, pairs)
        text_kwargs = "{prompt_key: prompt, completion_key: completion}"
        chat_kwargs = (
            "{multi_turn_key: messages, multi_turn_role_key: role, multi_turn_content_key: content}"
        )
        runs = [
            (f"{name}, processes: {n}", hook, kwargs, ftfy, n)
            for name, hook, kwargs, ftfy in (
                ("prompt/completion", "prompt_completion_text_read_hook", text_kwargs, False),
                ("chat (Jinja template)", "chat_read_hook", chat_kwargs, False),
                ("prompt/completion, use_ftfy", "prompt_completion_text_read_hook", text_kwargs,
                 True),
            )
            for n in (1, 2)
        ]  # fmt: skip
        loads = [_load()]
        sides = 3  # encode_batch on every core, on one thread, the floor
        seconds: list[list[float]] = [[] for _ in range(len(runs) + sides)]
        cpus: list[list[float]] = [[] for _ in range(len(runs) + sides)]
        same: list[bool] = []
        for _round in range(args.reps):
            for side, kind in enumerate(("threads", "one", "floor")):
                tokens, took, cpu = _fresh(kind, root)
                seconds[side].append(took)
                cpus[side].append(cpu)
            for i in range(0, len(runs), 2):  # 1 then 2 processes of one kind
                took, cpu, one = _plugtrain(root, str(i), runs[i])
                seconds[i + sides].append(took)
                cpus[i + sides].append(cpu)
                took, cpu, two = _plugtrain(root, str(i + 1), runs[i + 1])
                seconds[i + sides + 1].append(took)
                cpus[i + sides + 1].append(cpu)
                same.append(_contents(one) == _contents(two))
                shutil.rmtree(one)
                shutil.rmtree(two)
        loads.append(_load())
    names = ["tokenizers encode_batch", "tokenizers encode_batch, one thread"]
    names += ["floor: one-thread encode_batch + ids/offsets to arrays + deflate"]
    names += [f"plugtrain preprocess, {name}" for name, *_ in runs]
    print(f"{len(pairs)} records, {tokens} tokens (each side tokenizes the same text); median "
          f"of {args.reps} interleaved rounds; {loads[0]} before, {loads[1]} after\n")  # fmt: skip
    _table(names, seconds, cpus, tokens)
    verdict = "byte-equal" if all(same) else "DIFFERENT"
    print(f"\nfiles of processes 1 and 2: {verdict} ({sum(same)} of {len(same)} pairs)")
    if not all(same):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
