"""``plugtrain preprocess --config`` throughput beside a plain ``tokenizers`` batch encode.

    python bench/preprocess_throughput.py [--records 4000]

Both sides tokenize the same text: records cut from the running Python's standard-library
source (prompt: a chunk's first half, completion: its second half), with a byte-level BPE
tokenizer trained here on that text (vocabulary 8000, no download). Baseline: one
``Tokenizer.encode_batch`` of each record's full text (prompt + sep + completion + EOS), the
fastest a tokenizer alone goes (it runs on every core). plugtrain: the whole preprocessing run
from the YAML file (reading JSON lines, read hook, encoding with offsets, loss masks,
padding, HDF5 writing, ``data_params.json``), once as prompt/completion, once as chats
rendered with a Jinja template, once more with ``use_ftfy: true`` (Model Zoo's default).
Tokens per second are the baseline's token count over each side's wall time; one run each,
printed side by side with the ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sysconfig
import tempfile
import time
from pathlib import Path

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


def _baseline(folder: Path, pairs: list[tuple[str, str]]) -> tuple[int, float]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = [p + SEP + c + EOS for p, c in pairs]
    start = time.perf_counter()
    encodings = tokenizer.encode_batch(texts)
    seconds = time.perf_counter() - start
    return sum(len(e.ids) for e in encodings), seconds


def _plugtrain(root: Path, name: str, hook: str, kwargs: str, ftfy: bool) -> float:
    from plugtrain_models.data.config_run import run_config

    config = root / f"{name}.yaml"
    output = root / f"out_{name}"
    text = CONFIG.format(
        source=root / ("chats" if "chat" in hook else "pairs"),
        output=output,
        tokenizer=root / "tokenizer",
        ftfy=str(ftfy).lower(),
        hook=hook,
        kwargs=kwargs,
        sep=SEP,
    )
    config.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    run_config(str(config), io.StringIO(), io.StringIO())
    seconds = time.perf_counter() - start
    shutil.rmtree(output)
    return seconds


def main() -> None:
    """Run both sides once and print tokens/s and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    args = parser.parse_args()
    pairs = _texts(args.records)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        _tokenizer(root / "tokenizer", pairs)
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
        tokens, base = _baseline(root / "tokenizer", pairs)
        text_kwargs = "{prompt_key: prompt, completion_key: completion}"
        chat_kwargs = (
            "{multi_turn_key: messages, multi_turn_role_key: role, multi_turn_content_key: content}"
        )
        runs = [
            ("prompt/completion", "prompt_completion_text_read_hook", text_kwargs, False),
            ("chat (Jinja template)", "chat_read_hook", chat_kwargs, False),
            ("prompt/completion, use_ftfy", "prompt_completion_text_read_hook", text_kwargs, True),
        ]
        rows = [(name, _plugtrain(root, str(i), h, k, f)) for i, (name, h, k, f) in enumerate(runs)]
    print(f"{len(pairs)} records, {tokens} tokens (each side tokenizes the same text)\n")
    print("| side | seconds | tokens/s | plugtrain / encode_batch |")
    print("|---|---|---|---|")
    print(f"| tokenizers encode_batch | {base:.2f} | {tokens / base:,.0f} | 1.00 |")
    for name, seconds in rows:
        print(f"| plugtrain preprocess, {name} | {seconds:.2f} | {tokens / seconds:,.0f} | "
              f"{base / seconds:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
