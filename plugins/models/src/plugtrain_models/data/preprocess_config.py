"""Model Zoo's preprocessing YAML (``setup``, ``processing``, ``dataset``), checked with positions.

Every key of Model Zoo 2.10's fine-tuning and pre-training text configurations is known: used,
accepted with no effect here (listed once, with why), or refused with a reason. Unknown keys,
wrong types and a Hub data set are errors at ``file:line:column``. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.config.reading.yaml_loader import location_of, read_yaml_file
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["PreprocessConfig", "load_preprocess_config"]

STR, INT, BOOL, MAP, ANY = "a string", "an integer", "true or false", "a mapping", "anything"

BUFFERS = "Model Zoo's reader/writer buffers; here samples go straight to their files"
CLUSTER = "multi-node preprocessing on a Cerebras cluster"
DPO_ROLES = "mode dpo renders the prompt as a user turn and each response as an assistant turn"

# key: (expected type, None when used | "why it has no effect" | "!why it is refused")
SETUP: dict[str, tuple[str, str | None]] = {
    "data": (MAP, None),
    "mode": (STR, None),
    "output_dir": (STR, None),
    "processes": (INT, None),
    "num_nodes": (INT, CLUSTER),
    "rank": (INT, CLUSTER),
    "slurm": (ANY, CLUSTER),
    "metadata_files": (ANY, "!give the files' folder as setup.data.source"),
    "image_dir": (ANY, "!multimodal data is not supported"),
    "data_splits": (ANY, "!split the files yourself and run once per split"),
    "data_splits_dir": (ANY, "!split the files yourself and run once per split"),
    "token_generator": (ANY, "!custom token generators (Python classes) are not supported"),
}
DATA: dict[str, tuple[str, str | None]] = {
    "type": (STR, None),
    "source": (STR, None),
    "split": (STR, "only Hub data sets have splits"),
    "cache_dir": (STR, "only Hub data sets are cached"),
}
PROCESSING: dict[str, tuple[str, str | None]] = {
    "huggingface_tokenizer": (STR, None),
    "custom_tokenizer": (STR, None),
    "tokenizer_params": (ANY, "the tokenizer folder's files say everything"),
    "eos_id": (INT, None),
    "pad_id": (INT, None),
    "max_seq_length": (INT, None),
    "read_hook": (STR, None),
    "read_hook_kwargs": (MAP, None),
    "shuffle": (BOOL, None),
    "shuffle_seed": (INT, None),
    "use_ftfy": (BOOL, None),
    "ftfy_normalizer": (STR, None),
    "wikitext_detokenize": (BOOL, None),
    "input_ids_dtype": (STR, None),
    "input_mask_dtype": (STR, None),
    "inverted_mask": (BOOL, None),
    "min_sequence_len": (INT, None),
    "end_of_turn_token": (STR, None),
    "semantic_loss_weight": (MAP, None),
    "semantic_drop_mask": (MAP, None),
    "UNSAFE_skip_jsonl_decoding_errors": (BOOL, None),
    "write_in_batch": (BOOL, BUFFERS),
    "read_chunk_size": (INT, BUFFERS),
    "write_chunk_size": (INT, BUFFERS),
    "fraction_of_RAM_alloted": (ANY, BUFFERS),
    "resume_from_checkpoint": (BOOL, "a run writes all its files again"),
    "short_seq_prob": (ANY, "packed pre-training samples are all full length here"),
    "semantic_attention_mask": (MAP, "multimodal only: text attention is causal"),
    "token_limit": (ANY, "!token_limit is not supported: give fewer input files"),
}
DATASET: dict[str, tuple[str, str | None]] = {
    "sep_token": (STR, None),
    "chat_template": (STR, None),
    "truncate_to_msl": (MAP, None),
    "use_vsl": (BOOL, None),
    "pack_sequences": (BOOL, None),
    "is_multimodal": (BOOL, None),
    "position_ids_dtype": (STR, None),
    "training_objective": (STR, "!only plain language modelling (no fim, bert_pretraining)"),
    "max_prompt_length": (INT, None),
    "response_delimiter": (STR, None),
    "user_role": (STR, DPO_ROLES),
    "assistant_role": (STR, DPO_ROLES),
}
TRUNCATION = {"prompt_truncation_mode": STR, "truncation_mode": STR, "max_turn_length": INT}
SECTIONS = {"setup": SETUP, "processing": PROCESSING, "dataset": DATASET}
MODES = ("pretraining", "finetuning", "dpo")
DOWNLOAD = (
    "Hub data sets are not downloaded here: save it first "
    "(datasets.load_dataset(NAME, split=SPLIT).to_json('FOLDER/data.jsonl')), then write "
    "type: local, source: FOLDER"
)


def _type_ok(value: Any, kind: str) -> bool:
    if kind == ANY:
        return True
    if value is None:
        return True  # null: the default
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == MAP:
        return isinstance(value, Mapping)
    return isinstance(value, str)


@attrs.frozen
class PreprocessConfig:
    """A checked preprocessing file: its sections, and the keys that have no effect here.

    :param no_effect: ``(location, dotted key, why)`` of each accepted key without effect.
    """

    source_file: str
    setup: Mapping[str, Any]
    processing: Mapping[str, Any]
    dataset: Mapping[str, Any]
    no_effect: list[tuple[str, str, str]]

    @property
    def mode(self) -> str:
        """``pretraining`` or ``finetuning``."""
        return str(self.setup.get("mode") or "finetuning")

    @property
    def tokenizer(self) -> str:
        """The local tokenizer folder."""
        return str(
            self.processing.get("huggingface_tokenizer") or self.processing["custom_tokenizer"]
        )

    def where(self, section: str, key: str | None = None) -> str:
        """``file:line:column`` of ``section.key`` (of the section when ``key`` is None)."""
        parent = {"setup": self.setup, "processing": self.processing, "dataset": self.dataset}
        found = location_of(parent[section], key) if key else getattr(parent[section], "mark", None)
        return str(found or self.source_file)

    def issue(self, section: str, key: str, message: str) -> ConfigError:
        """A :class:`ConfigError` about ``section.key`` at its position."""
        return ConfigError([ConfigIssue(f"{section}.{key}", message, self.where(section, key))])


def _check_keys(
    mapping: Mapping[str, Any],
    table: Mapping[str, tuple[str, str | None]],
    owner: str,
    issues: list[ConfigIssue],
    no_effect: list[tuple[str, str, str]],
) -> None:
    for key, value in mapping.items():
        where = location_of(mapping, key, of_key=True)
        path = f"{owner}.{key}"
        if key not in table:
            known = ", ".join(sorted(table))
            issues.append(ConfigIssue(path, f"unknown key (known here: {known})", where))
            continue
        kind, note = table[key]
        if not _type_ok(value, kind):
            issues.append(ConfigIssue(path, f"must be {kind}", location_of(mapping, key)))
        elif note is not None and note.startswith("!"):
            if value not in (None, False):
                issues.append(ConfigIssue(path, note[1:], where))
        elif note is not None:
            no_effect.append((str(where), path, note))


def _value_problems(config: PreprocessConfig) -> list[ConfigIssue]:
    issues = []

    def problem(section: str, key: str, message: str) -> None:
        issues.append(ConfigIssue(f"{section}.{key}", message, config.where(section, key)))

    setup, processing, dataset = config.setup, config.processing, config.dataset
    if setup.get("mode") not in (None, *MODES):
        problem("setup", "mode", f"must be one of {', '.join(MODES)} (others are not supported)")
    data = setup.get("data")
    if not isinstance(data, Mapping):
        problem("setup", "data", "give data: {type: local, source: FOLDER_OR_FILE}")
    elif data.get("type") not in (None, "local"):
        where = location_of(data, "type") or config.where("setup", "data")
        issues.append(ConfigIssue("setup.data.type", DOWNLOAD, where))
    elif not data.get("source"):
        problem("setup", "data", "give source: the folder or file of the data")
    elif not os.path.exists(str(data["source"])):
        where = location_of(data, "source") or config.where("setup", "data")
        message = f"{data['source']}: no such file or folder (relative to the working directory)"
        issues.append(ConfigIssue("setup.data.source", message, where))
    tokenizers = [k for k in ("huggingface_tokenizer", "custom_tokenizer") if processing.get(k)]
    if len(tokenizers) != 1:
        problem("processing", "huggingface_tokenizer", "give exactly one of huggingface_tokenizer "
                "and custom_tokenizer: a local tokenizer folder")  # fmt: skip
    elif not os.path.isdir(str(processing[tokenizers[0]])):
        message = (
            f"{processing[tokenizers[0]]}: not a local tokenizer folder (nothing is downloaded "
            "here: save it first with AutoTokenizer.from_pretrained(NAME).save_pretrained(FOLDER))"
        )
        problem("processing", tokenizers[0], message)
    if not processing.get("read_hook"):
        problem("processing", "read_hook", "required: module:function of the read hook")
    kwargs = processing.get("read_hook_kwargs")
    if not kwargs or not any(str(k).endswith("_key") for k in kwargs):
        problem("processing", "read_hook_kwargs", "required: the data keys (names ending _key)")
    for key in ("max_seq_length", "min_sequence_len"):
        value = processing.get(key)
        if value is not None and value < 1:
            problem("processing", key, "must be >= 1")
    for key in ("input_ids_dtype", "input_mask_dtype"):
        if processing.get(key) not in (None, "int32"):
            problem("processing", key, "only int32 is written (the readers' dtype)")
    if dataset.get("position_ids_dtype") not in (None, "int32"):
        problem("dataset", "position_ids_dtype", "only int32 is written")
    if processing.get("wikitext_detokenize"):
        problem("processing", "wikitext_detokenize", "wikitext detokenization is not supported")
    if dataset.get("is_multimodal"):
        problem("dataset", "is_multimodal", "multimodal data is not supported")
    return issues


def load_preprocess_config(path: str | os.PathLike[str]) -> PreprocessConfig:
    """Read and check a preprocessing YAML.

    :raises ConfigError: every problem at once, each at ``file:line:column``.
    """
    data = read_yaml_file(path)
    source = str(path)
    if not isinstance(data, Mapping):
        raise ConfigError(
            [ConfigIssue("", "must be a mapping of setup, processing, dataset", source)]
        )
    issues: list[ConfigIssue] = []
    no_effect: list[tuple[str, str, str]] = []
    sections: dict[str, Any] = {}
    for key, value in data.items():
        if key not in SECTIONS:
            message = f"unknown section (known: {', '.join(SECTIONS)})"
            issues.append(ConfigIssue(str(key), message, location_of(data, key, of_key=True)))
        elif value is not None and not isinstance(value, Mapping):
            issues.append(ConfigIssue(str(key), "must be a mapping", location_of(data, key)))
    for name, table in SECTIONS.items():
        section = data.get(name) if isinstance(data.get(name), Mapping) else None
        sections[name] = section if section is not None else {}
        if section is not None:
            _check_keys(section, table, name, issues, no_effect)
    data_section = sections["setup"].get("data")
    if isinstance(data_section, Mapping):
        _check_keys(data_section, DATA, "setup.data", issues, no_effect)
    truncation = sections["dataset"].get("truncate_to_msl")
    if isinstance(truncation, Mapping):
        table = {k: (kind, None) for k, kind in TRUNCATION.items()}
        _check_keys(truncation, table, "dataset.truncate_to_msl", issues, no_effect)
    config = PreprocessConfig(
        source, sections["setup"], sections["processing"], sections["dataset"], no_effect
    )
    if not issues:
        issues = _value_problems(config)
    if issues:
        raise ConfigError(issues)
    return config
