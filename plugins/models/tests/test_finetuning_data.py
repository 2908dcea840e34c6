"""Fine-tuning data: ``plugtrain preprocess --config`` rows computed by hand, masks, statistics.

A byte-level BPE tokenizer folder is trained locally with ``tokenizers`` (``tokenizer.json``,
``tokenizer_config.json`` with a Jinja ``chat_template``); transformers' ``AutoTokenizer`` on
the same folder is the oracle for encoding and chat rendering. The expected rows are built from
the pieces of each record (special tokens split the text, so each piece encodes on its own).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from plugtrain.cli import main
from plugtrain_models.data.tokenizer_folder import CHATML_TEMPLATE, TokenizerFolder

tokenizers = pytest.importorskip("tokenizers")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

BOS, EOS, SH, EH, EOT, SEP, IMS, IME = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|sep|>",
    "<|im_start|>",
    "<|im_end|>",
)
SPECIALS = [BOS, EOS, SH, EH, EOT, SEP, IMS, IME]
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>{% endif %}"
)
CORPUS = [
    "Summarize the following article about cats and dogs.",
    "The cat sat on the mat while the dog slept.",
    "Hello, how are you today? I am fine, thank you!",
    "Grüße aus Köln: naïve café, déjà vu.",
]


def build_tokenizer(folder: Path, template: str | None, eos: str = EOS) -> Path:
    """A byte-level BPE tokenizer folder (BOS added to single texts), with ``template``."""
    models, pre, processors, trainers = (
        tokenizers.models,
        tokenizers.pre_tokenizers,
        tokenizers.processors,
        tokenizers.trainers,
    )
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 5, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": eos,
    }
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``llama3``: the template above, EOS <|end_of_text|>; ``chatml``: none, EOS <|im_end|>."""
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        "llama3": build_tokenizer(root / "llama3", TEMPLATE),
        "chatml": build_tokenizer(root / "chatml", None, eos=IME),
    }


def _hf(folder: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(folder))


CHATS = [
    [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "Hello, how are you?"},
        {"role": "assistant", "content": "I am fine, thank you!"},
        {"role": "user", "content": "The cat?"},
        {"role": "assistant", "content": "It sat on the mat."},
    ],
    [{"role": "user", "content": "Grüße aus Köln"}, {"role": "assistant", "content": "déjà vu"}],
]


def test_tokenizer_folder_encodes_and_renders_as_transformers(folders: dict[str, Path]) -> None:
    text = f"Summarize the cat.{SEP}The dog slept.{EOS} Grüße"
    for name, folder in folders.items():
        ours, theirs = TokenizerFolder(folder), _hf(folder)
        ids, offsets = ours.encode(text)
        expected = theirs(text, return_offsets_mapping=True)
        assert ids == expected["input_ids"]
        assert offsets == [tuple(o) for o in expected["offset_mapping"]]
        plain = ours.encode(text, add_special_tokens=False)[0]
        assert plain == theirs(text, add_special_tokens=False)["input_ids"]
        assert ours.vocab_size == len(theirs)
        assert ours.token_id("eos_token") == theirs.eos_token_id
        for chat in CHATS:
            template = None if name == "llama3" else CHATML_TEMPLATE
            rendered = theirs.apply_chat_template(chat, tokenize=False, chat_template=template)
            assert TokenizerFolder(folder, template).apply_chat_template(chat) == rendered


def _pieces(folder: Path, *parts: str | int) -> list[int]:
    """Ids of text pieces (encoded alone, no special tokens) and special tokens (strings in
    SPECIALS), laid end to end."""
    tokenizer = TokenizerFolder(folder)
    ids: list[int] = []
    for part in parts:
        if part in SPECIALS:
            ids.append(tokenizer.token_to_id(str(part)))
        else:
            ids.extend(tokenizer.encode(str(part), add_special_tokens=False)[0])
    return ids


def _rows(samples: list[tuple[list[int], list[int]]], msl: int, pad: int) -> np.ndarray:
    """Model Zoo's shift and padding, written out: [ids[:-1], mask[1:], ids[1:]]."""
    rows = []
    for ids, mask in samples:
        n = len(ids) - 1
        fill = msl - n
        rows.append([ids[:-1] + [pad] * fill, mask[1:] + [0] * fill, ids[1:] + [pad] * fill])
    return np.asarray(rows, dtype=np.int32)


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _run(config: Path) -> None:
    assert main(["preprocess", "--config", str(config)]) == 0


def _read(folder: Path) -> tuple[np.ndarray, dict[str, Any]]:
    files = sorted(folder.glob("*.h5"))
    arrays = []
    for path in files:
        with h5py.File(path, "r") as file:
            data = file["data"]
            assert data.dtype == np.int32
            assert data.compression == "gzip"
            assert data.chunks == (1, *data.shape[1:])
            assert file.attrs["n_examples"] == data.shape[0]
            arrays.append(data[()])
    params = json.loads((folder / "data_params.json").read_text(encoding="utf-8"))
    return np.concatenate(arrays), params


CONFIG = """\
setup:
  data: {{type: local, source: {source}}}
  output_dir: {output}
  mode: finetuning
processing:
  huggingface_tokenizer: {tokenizer}
  max_seq_length: {msl}
  min_sequence_len: 6
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:{hook}"
  read_hook_kwargs: {kwargs}
  use_ftfy: false
dataset: {dataset}
"""


def _config(tmp_path: Path, folder: Path, hook: str, kwargs: str, **keys: Any) -> Path:
    config = tmp_path / "preprocess.yaml"
    values = {"msl": 32, "dataset": "{}", **keys}
    text = CONFIG.format(
        source=tmp_path / "data",
        output=tmp_path / "out",
        tokenizer=folder,
        hook=hook,
        kwargs=kwargs,
        **values,
    )
    config.write_text(text, encoding="utf-8")
    return config


PROMPTS = [
    {"prompt": "Summarize the cat.", "completion": "The cat sat."},
    {"prompt": "Hello", "completion": ""},  # no completion: skipped
    {"prompt": "The dog slept on the mat while the cat sat on it.", "completion": "Dogs sleep."},
    {"prompt": "a", "completion": "b"},  # 5 tokens < min_sequence_len 6: discarded
    {"prompt": "Grüße aus Köln", "completion": "déjà vu"},
]


def test_prompt_completion_rows_by_hand_equal_preprocess(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    folder = folders["llama3"]
    _write_jsonl(tmp_path / "data" / "train.jsonl", PROMPTS)
    kwargs = "{prompt_key: prompt, completion_key: completion}"
    _run(_config(tmp_path, folder, "prompt_completion_text_read_hook", kwargs, msl=20))
    data, params = _read(tmp_path / "out")
    eos = TokenizerFolder(folder).token_id("eos_token")
    expected = []
    for record in PROMPTS:
        prompt = _pieces(folder, BOS, record["prompt"], SEP)
        completion = _pieces(folder, record["completion"], EOS)
        ids = prompt + completion
        if not record["completion"] or not 6 <= len(ids) <= 20:
            continue  # 5 tokens: too short; the long prompt: 21 tokens > 20, dropped
        expected.append((ids, [0] * len(prompt) + [1] * len(completion)))
    assert len(expected) == 2
    np.testing.assert_array_equal(data, _rows(expected, 20, eos))
    post = params["post-process"]
    assert post["n_examples"] == 2
    assert post["total_raw_docs"] == 5
    assert post["raw_docs_skipped"] == 1
    assert post["discarded_files"] == 2
    assert post["loss_valid_tokens"] == int(data[:, 1].sum())
    assert post["num_pad_tokens"] == int((data[:, 0] == eos).sum())
    assert post["num_tokens"] == 40
    assert post["num_masked_tokens"] == 40 - post["loss_valid_tokens"]
    assert params["processing"]["eos_id"] == params["processing"]["pad_id"] == eos
    assert params["features"] == ["input_ids", "attention_mask", "labels"]


def test_long_prompts_are_truncated_as_truncate_to_msl_says(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    folder = folders["llama3"]
    record = PROMPTS[2]
    _write_jsonl(tmp_path / "data" / "train.jsonl", [record])
    kwargs = "{prompt_key: prompt, completion_key: completion}"
    dataset = "{truncate_to_msl: {prompt_truncation_mode: keep_start, max_turn_length: 4}}"
    hook = "prompt_completion_text_read_hook"
    _run(_config(tmp_path, folder, hook, kwargs, msl=16, dataset=dataset))
    data, params = _read(tmp_path / "out")
    prompt, sep = _pieces(folder, BOS, record["prompt"]), _pieces(folder, SEP)
    completion = _pieces(folder, record["completion"], EOS)
    cut = len(prompt) + len(sep) + len(completion) - 16
    assert len(prompt) - cut >= 4  # max_turn_length: what a turn keeps at least
    kept = prompt[: len(prompt) - cut] + sep  # keep_start: the prompt's end goes, not the sep
    expected = [(kept + completion, [0] * len(kept) + [1] * len(completion))]
    pad = TokenizerFolder(folder).token_id("eos_token")
    np.testing.assert_array_equal(data, _rows(expected, 16, pad))
    assert params["post-process"]["discarded_files"] == 0


def _chat_expected(folder: Path, chat: list[dict[str, str]], chatml: bool) -> tuple[list, list]:
    """The rendered chat's ids and mask from its pieces: 1 on assistant text and its end."""
    ids: list[int] = [] if chatml else _pieces(folder, BOS)
    mask: list[int] = [0] * len(ids)
    for turn in chat:
        scored = int(turn["role"] == "assistant")
        head = (
            _pieces(folder, IMS, turn["role"], "\n")
            if chatml
            else _pieces(folder, SH, turn["role"], EH)
        )
        content = _pieces(folder, turn["content"], IME if chatml else EOT)
        tail = _pieces(folder, "\n") if chatml else []
        ids += head + content + tail
        mask += [0] * len(head) + [scored] * len(content) + [0] * len(tail)
    return ids, mask


@pytest.mark.parametrize("name", ["llama3", "chatml"])
def test_chat_rows_by_hand_equal_preprocess(
    tmp_path: Path, folders: dict[str, Path], name: str
) -> None:
    """llama3: the end of turn is not the EOS (one more token after each assistant turn);
    chatml (no template in the folder: ChatML): the EOS <|im_end|> closes every turn."""
    folder = folders[name]
    odd = {"messages": [{"role": "user", "content": "Hello"}]}  # skipped: no answer
    _write_jsonl(tmp_path / "data" / "chat.jsonl", [{"messages": c} for c in CHATS] + [odd])
    kwargs = (
        "{multi_turn_key: messages, multi_turn_role_key: role, multi_turn_content_key: content}"
    )
    _run(_config(tmp_path, folder, "chat_read_hook", kwargs, msl=96))
    data, params = _read(tmp_path / "out")
    expected = [_chat_expected(folder, chat, name == "chatml") for chat in CHATS]
    pad = TokenizerFolder(folder).token_id("eos_token")
    np.testing.assert_array_equal(data, _rows(expected, 96, pad))
    rendered = _hf(folder).apply_chat_template(
        CHATS[0], tokenize=True, chat_template=CHATML_TEMPLATE if name == "chatml" else None
    )
    ids = rendered["input_ids"] if hasattr(rendered, "keys") else rendered
    assert list(ids) == expected[0][0]  # the rows' tokens are transformers' own
    assert params["post-process"]["raw_docs_skipped"] == 1


def test_prompt_completion_chat_hook_uses_the_template(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    folder = folders["llama3"]
    _write_jsonl(tmp_path / "data" / "train.jsonl", [{"q": "  The cat? ", "a": " It sat. "}])
    _run(
        _config(
            tmp_path,
            folder,
            "prompt_completion_chat_read_hook",
            "{prompt_key: q, completion_key: a}",
        )
    )
    data, _ = _read(tmp_path / "out")
    chat = [{"role": "user", "content": "The cat?"}, {"role": "assistant", "content": "It sat."}]
    expected = _chat_expected(folder, chat, chatml=False)
    pad = TokenizerFolder(folder).token_id("eos_token")
    np.testing.assert_array_equal(data, _rows([expected], 32, pad))


def test_vsl_packs_samples_first_fit_with_spans_and_positions(
    tmp_path: Path, folders: dict[str, Path]
) -> None:
    folder = folders["llama3"]
    records = [{"prompt": p, "completion": c} for p, c in
               [("Summarize the cat.", "The cat sat."), ("Hello, how are you?", "I am fine."),
                ("Hi there", "Yo dog"), ("The dog?", "It slept.")]]  # fmt: skip
    _write_jsonl(tmp_path / "data" / "train.jsonl", records)
    kwargs = "{prompt_key: prompt, completion_key: completion}"
    hook = "prompt_completion_text_read_hook"
    _run(_config(tmp_path, folder, hook, kwargs, msl=30, dataset="{use_vsl: true}"))
    data, params = _read(tmp_path / "out")
    samples = []
    for record in records:
        prompt = _pieces(folder, BOS, record["prompt"], SEP)
        completion = _pieces(folder, record["completion"], EOS)
        samples.append((prompt + completion, [0] * len(prompt) + [1] * len(completion)))
    bins: list[list[int]] = []  # first fit, in record order
    for index, (ids, _) in enumerate(samples):
        room = [30 - sum(len(samples[i][0]) for i in b) for b in bins]
        target = next((b for b, free in enumerate(room) if free >= len(ids)), None)
        if target is None:
            bins.append([index])
        else:
            bins[target].append(index)
    assert 1 < len(bins) < len(samples)  # some packing happened
    pad = TokenizerFolder(folder).token_id("eos_token")
    assert data.shape == (len(bins), 5, 30)
    for rows, members in zip(data, bins, strict=True):
        ids = [t for i in members for t in samples[i][0]]
        mask = [m for i in members for m in samples[i][1]]
        spans, positions = [], []
        for k, i in enumerate(members):
            n = len(samples[i][0]) - (k == len(members) - 1)
            spans += list(range(n - 1, -1, -1))
            positions += list(range(n))
        fill = 30 - (len(ids) - 1)
        np.testing.assert_array_equal(rows[0], ids[:-1] + [pad] * fill)
        np.testing.assert_array_equal(rows[1], mask[1:] + [0] * fill)
        np.testing.assert_array_equal(rows[2], ids[1:] + [pad] * fill)
        np.testing.assert_array_equal(rows[3], spans + [0] * fill)
        np.testing.assert_array_equal(rows[4], positions + [0] * fill)
    post = params["post-process"]
    assert post["num_sequences_before_packing"] == 4
    assert post["n_examples"] == len(bins)
    assert params["features"][3:] == ["attention_span", "position_ids"]


@pytest.fixture(scope="module")
def llama(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """A tiny random transformers Llama (saved, then converted) and plugtrain's same model."""
    import torch

    from plugtrain.conversion import hf_to_plugtrain
    from plugtrain_models.families import build_decoder

    vocab = TokenizerFolder(folders["llama3"]).vocab_size
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=False, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("hf_llama")
    hf.save_pretrained(str(folder))
    converted = hf_to_plugtrain(str(folder))
    keys = {**converted.model_keys, "loss_scaling": "num_tokens", "loss_weight": 1.0}
    ours = build_decoder(converted.model_name, keys)
    ours.load_state_dict(converted.state)
    return hf, ours


@pytest.mark.parametrize("use_vsl", [False, True])
def test_validate_loss_is_the_masked_cross_entropy_of_transformers(
    tmp_path: Path, folders: dict[str, Path], llama: tuple[Any, Any], use_vsl: bool
) -> None:
    """plugtrain's validate on the written files equals sum(CE x mask) / sum(mask) computed
    with transformers on each record alone (VSL: the records packed, attending apart)."""
    import torch

    import plugtrain
    from plugtrain_models.data.map_processor import gpt_hdf5_map_loader

    folder = folders["llama3"]
    chats = [*CHATS, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]]
    _write_jsonl(tmp_path / "data" / "chat.jsonl", [{"messages": c} for c in chats])
    kwargs = (
        "{multi_turn_key: messages, multi_turn_role_key: role, multi_turn_content_key: content}"
    )
    dataset = "{use_vsl: true}" if use_vsl else "{}"
    _run(_config(tmp_path, folder, "chat_read_hook", kwargs, msl=96, dataset=dataset))
    hf, ours = llama
    loader = gpt_hdf5_map_loader(batch_size=1, data_dir=str(tmp_path / "out"), use_vsl=use_vsl)
    trainer = plugtrain.Trainer(device="CPU", model_dir=tmp_path / "model", model=ours)
    metrics = trainer.validate(loader, ckpt_path=None)
    total = weight = 0.0
    with torch.no_grad():
        for chat in chats:
            ids, mask = _chat_expected(folder, chat, chatml=False)
            logits = hf(torch.tensor([ids])).logits[0, :-1].float()
            losses = torch.nn.functional.cross_entropy(
                logits, torch.tensor(ids[1:]), reduction="none"
            )
            total += float((losses * torch.tensor(mask[1:])).sum())
            weight += sum(mask[1:])
    # float32 logits of the same weights: the two sums agree to rounding (~1e-6 relative)
    assert metrics["loss"] == pytest.approx(total / weight, rel=1e-5)
    _, params = _read(tmp_path / "out")
    examples = params["post-process"]["n_examples"]
    assert examples < 3 if use_vsl else examples == 3  # VSL: two records share a sample
