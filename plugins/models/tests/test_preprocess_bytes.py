"""``plugtrain preprocess --config`` writes the bytes a plain, one-record-at-a-time run writes.

The batch path (one ``encode_batch`` per batch of records, masks, padding and packing with
numpy, each sample compressed as its HDF5 chunk and the files written as they fill) is compared
with a reference written here the simple way: each record encoded on its own, padded in a
Python loop, the samples stacked and written with h5py's ``create_dataset(data=...)`` as the
files were always written. Prompt/completion, chats with a
Jinja template and pre-training text, each over several files, the flag form's text; and 1
against 2 processes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from plugtrain.errors import ConfigError, TrainingError
from plugtrain_models.data import config_run, preprocess
from plugtrain_models.data.config_jobs import ConfigRun
from plugtrain_models.data.finetuning import Encoded, Skipped
from plugtrain_models.data.packing import Packer, sample_rows
from plugtrain_models.data.preprocess import main as preprocess_main
from plugtrain_models.data.preprocess_config import load_preprocess_config
from plugtrain_models.data.regions import OffsetArrays, find_token_range, find_token_range_arrays
from plugtrain_models.data.sample_chunks import compress_samples
from plugtrain_models.data.tokenizer import load_tokenizer
from plugtrain_models.data.tokenizer_folder import TokenizerFolder
from plugtrain_models.data.writer import ChunkWriter

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

SEP, EOS, BOS = "<|sep|>", "<|end_of_text|>", "<|begin_of_text|>"
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>{{ message['content'] }}<|eot_id|>{% endfor %}"
)
WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat;",
    "Grüße",
    "aus",
    "Köln,",
    "naïve",
    "café",
    "日本語",
    "😀",
    "def",
    "f(x):",
    "return",
    "x",
    "+",
    "1",
]
PER_FILE = 7  # samples per file here: every run writes several files
HOOKS = "cerebras.modelzoo.data_preparation.data_preprocessing.hooks"


def _text(rng: np.random.Generator, words: int) -> str:
    return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), words))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer folder (BOS added, EOS, sep, a chat template) and records."""
    root = tmp_path_factory.mktemp("bytes")
    rng = np.random.default_rng(0)
    pairs = [(_text(rng, int(rng.integers(1, 30))), _text(rng, int(rng.integers(1, 30))))
             for _ in range(40)]  # fmt: skip
    pre = tokenizers.pre_tokenizers
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    specials = [BOS, EOS, SEP, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator([p + c for p, c in pairs], trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    (root / "tokenizer").mkdir()
    tokenizer.save(str(root / "tokenizer" / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "chat_template": TEMPLATE}
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config), "utf-8")
    records = {
        "pairs": [{"prompt": p, "completion": c} for p, c in pairs],
        "chats": [
            {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": c},
                          {"role": "user", "content": c[:20]}, {"role": "assistant", "content": p}]}
            for p, c in pairs
        ],
        "text": [{"text": p + "\n" + c} for p, c in pairs],
    }  # fmt: skip
    records["pairs"][3]["completion"] = ""  # skipped: empty text
    for name, items in records.items():
        (root / name).mkdir()
        lines = "".join(json.dumps(r) + "\n" for r in items)
        (root / name / "data.jsonl").write_text(lines, "utf-8")
    return root


def _config(root: Path, name: str, kind: str, extra: str = "", processes: int = 1) -> Path:
    hook, kwargs, source, mode = {
        "pairs": ("prompt_completion_text_read_hook",
                  "{prompt_key: prompt, completion_key: completion}", "pairs", "finetuning"),
        "chats": ("chat_read_hook", "{multi_turn_key: messages, multi_turn_role_key: role, "
                  "multi_turn_content_key: content}", "chats", "finetuning"),
        "text": ("text_read_hook", "{text_key: text}", "text", "pretraining"),
    }[kind]  # fmt: skip
    path = root / f"{name}.yaml"
    msl = 96 if kind == "chats" else 48
    path.write_text(
        f"setup:\n  data: {{type: local, source: {root / source}}}\n"
        f"  output_dir: {root / 'out' / name}\n  mode: {mode}\n  processes: {processes}\n"
        f"processing:\n  huggingface_tokenizer: {root / 'tokenizer'}\n  max_seq_length: {msl}\n"
        f'  use_ftfy: false\n  read_hook: "{HOOKS}:{hook}"\n  read_hook_kwargs: {kwargs}\n'
        f'{extra}dataset: {{sep_token: "{SEP}"}}\n',
        encoding="utf-8",
    )
    return path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _reference_finetuning(run: ConfigRun) -> list[np.ndarray]:
    """Each record encoded alone (its own ``encode`` call), padded in a Python loop."""
    encoder = run._finetuning_encoder()
    samples = []
    for _where, semantic in run.records():
        try:
            sample: Encoded = encoder.encode(semantic)
        except Skipped:
            continue
        rows = np.zeros((3, run.msl), dtype=np.int32)
        for position in range(run.msl):
            inside = position + 1 < len(sample.token_ids)
            rows[0, position] = sample.token_ids[position] if inside else run.pad_id
            rows[1, position] = sample.loss_mask[position + 1] if inside else 0
            rows[2, position] = sample.token_ids[position + 1] if inside else run.pad_id
        samples.append(rows)
    return samples


def _reference_pretraining(run: ConfigRun) -> list[np.ndarray]:
    """Each document encoded alone, its tokens + EOS cut into chunks of msl + 1 in a loop."""
    stream: list[int] = []
    for _where, semantic in run.records():
        text = "".join(p["text"] for turn in semantic for p in turn["content"])
        stream += [*run.tokenizer.encode(text)[0], run.eos_id]
    size = run.msl + 1
    chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
    if len(chunks[-1]) < max(2, run.min_length):
        chunks.pop()
    return [sample_rows(chunk, run.msl, run.pad_id) for chunk in chunks]


def _write_reference(folder: Path, samples: list[np.ndarray], per_file: int = PER_FILE) -> None:
    """The samples in files of ``per_file``, written whole with h5py (the writer of old)."""
    folder.mkdir(parents=True)
    for number, start in enumerate(range(0, len(samples), per_file)):
        data = np.stack(samples[start : start + per_file])
        with h5py.File(folder / f"data-{number:05d}.h5", "w") as file:
            file.create_dataset("data", data=data, dtype="i4", chunks=(1, *data.shape[1:]),
                                compression="gzip")  # fmt: skip
            file.attrs["n_examples"] = len(data)


@pytest.mark.parametrize("kind", ["pairs", "chats", "text"])
def test_batch_path_writes_the_reference_bytes(
    root: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_run, "SAMPLES_PER_FILE", PER_FILE)
    monkeypatch.setattr(config_run, "BATCH", 5)  # several batches, a partial last one
    path = _config(root, f"ref_{kind}", kind)
    params = config_run.run_config(str(path), io.StringIO(), io.StringIO())
    run = ConfigRun(load_preprocess_config(str(path)))
    make = _reference_pretraining if kind == "text" else _reference_finetuning
    samples = make(run)
    _write_reference(root / "reference" / kind, samples)
    written = _files(root / "out" / f"ref_{kind}")
    assert len(written) > 3  # several files and data_params.json
    assert {k: v for k, v in written.items() if k.endswith(".h5")} == _files(
        root / "reference" / kind
    )
    post: dict[str, Any] = params["post-process"]
    stack = np.stack(samples)
    assert post["n_examples"] == len(samples)
    assert post["loss_valid_tokens"] == int(stack[:, 1].sum())
    assert post["num_pad_tokens"] == int((stack[:, 0] == run.pad_id).sum())
    if kind == "pairs":
        assert post["raw_docs_skipped"] == 1


def test_processes_below_one_is_an_error_at_its_line(root: Path) -> None:
    path = _config(root, "procs_zero", "pairs", processes=0)
    with pytest.raises(
        ConfigError, match=r"procs_zero.yaml:5:\d+: setup.processes: must be at least 1"
    ):
        config_run.run_config(str(path), io.StringIO(), io.StringIO())
    assert not (root / "out" / "procs_zero").exists()


@pytest.mark.slow
def test_two_processes_write_the_bytes_of_one(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes (forked) encode batches; the files and statistics are the same."""
    monkeypatch.setattr(config_run, "SAMPLES_PER_FILE", PER_FILE)
    monkeypatch.setattr(config_run, "BATCH", 3)
    shuffle = "  shuffle: true\n  shuffle_seed: 5\n  inverted_mask: true\n"
    for kind, extra in (("chats", shuffle), ("text", "")):
        outputs = []
        for processes in (1, 2):
            name = f"procs_{kind}_{processes}"
            config_run.run_config(
                str(_config(root, name, kind, extra, processes)), io.StringIO(), io.StringIO()
            )
            files = _files(root / "out" / name)
            params = json.loads(files.pop("data_params.json"))
            assert params["setup"].pop("processes") == processes
            params["setup"].pop("output_dir")
            outputs.append((files, params))
        assert len(outputs[0][0]) > 2
        assert outputs[0] == outputs[1]
    # a record a worker cannot encode is named, and the run leaves no folder
    broken = _config(root, "procs_broken", "chats", processes=2)
    text = broken.read_text("utf-8").replace(
        "dataset: {", 'dataset: {chat_template: "{% for m in messages %}{{ m.role }}{% endfor %}", '
    )
    broken.write_text(text, "utf-8")
    with pytest.raises(TrainingError, match=r"chats/data.jsonl:1: the chat template does not show"):
        config_run.run_config(str(broken), io.StringIO(), io.StringIO())
    assert not (root / "out" / "procs_broken").exists()


def test_region_search_on_arrays_is_the_per_token_search() -> None:
    """Random offsets with gaps, overlaps and (0, 0) special tokens, random regions."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        count = int(rng.integers(1, 12))
        starts = rng.integers(0, 30, count)
        if rng.random() < 0.7:  # mostly in order, as tokenizers give them
            starts = np.sort(starts)
        ends = np.maximum(starts + rng.integers(-1, 4, count), 0)  # a few end before start
        zero = rng.random(count) < 0.15
        starts[zero] = ends[zero] = 0
        offsets = [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]
        begin = int(rng.integers(0, 32))
        region = {"indices": (begin, begin + int(rng.integers(0, 6)))}
        first = int(rng.integers(0, count + 1))
        try:
            expected: Any = find_token_range(region, offsets, first)
        except ValueError as exc:
            expected = str(exc)
        try:
            found: Any = find_token_range_arrays(region, OffsetArrays(starts, ends), first)
        except ValueError as exc:
            found = str(exc)
        assert found == expected, (offsets, region, first)


def test_offsets_of_a_batch_laid_end_to_end_are_each_texts_own() -> None:
    """A text's :meth:`OffsetArrays.part` of a batch searches as that text's own offsets do."""
    rng = np.random.default_rng(4)
    texts = []
    for _ in range(30):
        count = int(rng.integers(0, 9))  # some texts have no token
        starts = np.sort(rng.integers(0, 30, count))
        texts.append((starts, starts + rng.integers(0, 4, count)))
    bounds = np.concatenate([[0], np.cumsum([len(s) for s, _ in texts])])
    batch = OffsetArrays(
        np.concatenate([s for s, _ in texts]), np.concatenate([e for _, e in texts]), bounds
    )
    for number, (starts, ends) in enumerate(texts):
        alone = OffsetArrays(starts, ends)
        part = batch.part(int(bounds[number]), int(bounds[number + 1]))
        for name in ("starts", "ends", "reach", "following"):
            np.testing.assert_array_equal(getattr(part, name), getattr(alone, name))
        for begin in range(0, 32, 3):
            region = {"indices": (begin, begin + 2)}
            try:
                expected: Any = find_token_range_arrays(region, alone, 0)
            except ValueError as exc:
                expected = str(exc)
            try:
                found: Any = find_token_range_arrays(region, part, 0)
            except ValueError as exc:
                found = str(exc)
            assert found == expected


def test_batch_encoding_laid_end_to_end_is_each_texts_encoding(root: Path) -> None:
    folder = TokenizerFolder(root / "tokenizer")
    lines = (root / "pairs" / "data.jsonl").read_text("utf-8").splitlines()
    texts = [json.loads(line)["prompt"] + SEP + json.loads(line)["completion"] for line in lines]
    texts.append("")  # no token without special tokens
    for special in (True, False):
        ids, starts, ends, bounds = folder.encode_batch_flat(texts, special)
        assert ids.dtype == np.int32
        assert len(bounds) == len(texts) + 1
        for number, text in enumerate(texts):
            own_ids, own_offsets = folder.encode(text, add_special_tokens=special)
            span = slice(int(bounds[number]), int(bounds[number + 1]))
            assert ids[span].tolist() == own_ids
            assert list(zip(starts[span].tolist(), ends[span].tolist(), strict=True)) == own_offsets


@pytest.mark.parametrize("pack", [True, False])
def test_packing_batches_with_numpy_cuts_the_samples_of_one_by_one(pack: bool) -> None:
    rng = np.random.default_rng(2)
    documents = [rng.integers(0, 50, int(rng.integers(0, 30))) for _ in range(40)]
    one = Packer(8, 99, 98, pack=pack, min_sequence_length=4)
    expected = [s for d in documents for s in one.add(d.tolist())] + list(one.finish())
    many = Packer(8, 99, 98, pack=pack, min_sequence_length=4)
    found = np.concatenate(
        [
            many.add_many(documents[:17]),
            many.add_many(documents[17:]),
            many.add_many([], finish=True),
        ]
    )
    np.testing.assert_array_equal(found, np.stack(expected))
    assert many.dropped_tokens == one.dropped_tokens


def test_chunk_writer_writes_what_h5py_writes_incompressible_samples_too(tmp_path: Path) -> None:
    """Samples deflate cannot shrink go through HDF5's own filter; the file is the same."""
    rng = np.random.default_rng(3)
    data = np.zeros((5, 3, 64), dtype=np.int32)
    data[:, :, :20] = rng.integers(0, 500, (5, 3, 20))
    data[2] = rng.integers(-(2**31), 2**31 - 1, (3, 64))  # noise: deflate makes it longer
    chunks = compress_samples(data)
    assert isinstance(chunks[2], np.ndarray)
    assert isinstance(chunks[0], bytes)
    writer = ChunkWriter(tmp_path, samples_per_file=3)
    writer.add(chunks, (3, 64))
    writer.close()
    _write_reference(tmp_path / "reference", list(data), per_file=3)
    assert _files(tmp_path / "reference") == {p.name: p.read_bytes() for p in writer.files}


def test_flag_form_writes_the_reference_bytes(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``plugtrain preprocess FILE -o DIR``: documents in batches, the files of one by one."""
    monkeypatch.setattr(preprocess, "BATCH", 7)
    source = root / "text" / "data.jsonl"
    out = root / "out" / "flag"
    argv = [str(source), "-o", str(out), "--tokenizer", str(root / "tokenizer")]
    preprocess_main([*argv, "--max-seq-length", "16", "--samples-per-file", "5"], io.StringIO())
    tokenizer = load_tokenizer(str(root / "tokenizer"))
    packer = Packer(16, tokenizer.eos_id, tokenizer.pad_id)
    samples = []
    for line in source.read_text("utf-8").splitlines():
        samples += packer.add(tokenizer.encode(json.loads(line)["text"]))
    samples += packer.finish()
    _write_reference(root / "reference" / "flag", samples, per_file=5)
    written = {k: v for k, v in _files(out).items() if k.endswith(".h5")}
    assert len(written) > 2
    assert written == _files(root / "reference" / "flag")
