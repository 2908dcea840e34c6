"""Hugging Face checkpoints to plugtrain state and back, for any registered converter.

:func:`read_checkpoint` reads an opened Hugging Face checkpoint (see
:mod:`plugtrain.conversion.opening`) one shard at a time into the state dict of the plugtrain
model its ``config.json`` describes (:func:`hf_to_plugtrain` opens and reads in one call);
:func:`export_hf` writes a plugtrain model's state as a folder that
``transformers.AutoModelForCausalLM.from_pretrained`` loads.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from plugtrain.conversion.configs import plugtrain_to_hf_config
from plugtrain.conversion.declaration import (
    CheckpointConverter,
    ConversionContext,
    ConversionError,
)
from plugtrain.conversion.hf_files import (
    ReadAs,
    ShardedWriter,
    iter_file_tensors,
    iter_hf_tensors,
    parse_size,
)
from plugtrain.conversion.lookup import (
    complete_model_keys,
    find_converter,
    model_defaults,
    wrapped_converter,
)
from plugtrain.conversion.meta_build.building import on_meta
from plugtrain.conversion.opening import ForeignCheckpoint, open_checkpoint
from plugtrain.conversion.weights import RuleApplier

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = [
    "TOKENIZER_FILES", "Converted", "export_hf", "hf_to_plugtrain", "hf_weight_names",
    "model_layout", "read_checkpoint",
]  # fmt: skip

log = logging.getLogger("plugtrain.conversion")

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "vocab.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "generation_config.json",
)  # fmt: skip
"""The files of a tokenizer folder an export copies (``AutoTokenizer`` reads them)."""

_PREFIX = "model."


@attrs.frozen
class Converted:
    """A Hugging Face checkpoint as a plugtrain model's state.

    :param converter: the converter key used (``"llama"``).
    :param model_name: the plugtrain model to build (``model: {name: ...}``).
    :param model_keys: the ``model:`` keys without ``name``, as the converter wrote them.
    :param state: the model's state dict, named as the built model names it.
    :param dropped_config_keys: ``config.json`` keys the converter does not use.
    :param owned: the names of the tensors converted into memory of their own (``dtypes``
        of :func:`read_checkpoint`); the others may be views of the files.
    """

    converter: str
    model_name: str
    model_keys: dict[str, Any]
    state: dict[str, torch.Tensor]
    dropped_config_keys: list[str]
    owned: frozenset[str] = frozenset()


@attrs.frozen
class ModelLayout:
    """The state a model of given keys has: each tensor's shape, and names sharing a tensor."""

    shapes: dict[str, tuple[int, ...]]
    aliases: dict[str, str]


def model_layout(registry: Registry, model: str, keys: Mapping[str, Any]) -> ModelLayout:
    """Build ``model`` on the ``meta`` device (no memory) to learn its state's names and shapes."""
    factory = registry.resolve("model", model)
    with on_meta():
        module = factory(**keys)
    shapes = {name: tuple(t.shape) for name, t in module.state_dict(keep_vars=True).items()}
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        owner = first.setdefault(id(parameter), name)
        if owner != name:
            aliases[name] = owner
    return ModelLayout(shapes, aliases)


def _registry(registry: Registry | None) -> Registry:
    """The registry a Python caller of the helpers below gave, or the process's."""
    if registry is not None:
        return registry
    from plugtrain.discovery.loading import get_registry

    return get_registry()


def hf_to_plugtrain(
    source: str | os.PathLike[str],
    model: str | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    drop_unmatched: bool = False,
    registry: Registry | None = None,
) -> Converted:
    """Read a Hugging Face checkpoint into the state of the plugtrain model it describes.

    :func:`~plugtrain.conversion.opening.open_checkpoint` then its ``read``, for scripts.

    :param source: a folder, ``model.safetensors``, ``pytorch_model.bin`` or ``*.index.json``.
    :param model: the converter key (default: found from ``config.json``'s ``model_type``).
    :param config: the ``config.json`` (default: the one beside ``source``).
    :param drop_unmatched: leave out tensors no rule matches instead of failing.
    :param registry: where converters and models are found (default: the process's).
    :raises ConversionError: naming the key or tensor that does not convert.
    """
    opened = open_checkpoint(source, _registry(registry), converter=model, config=config)
    return read_checkpoint(opened, drop_unmatched=drop_unmatched)


def read_checkpoint(
    opened: ForeignCheckpoint,
    *,
    drop_unmatched: bool = False,
    dtypes: Mapping[str, torch.dtype] | None = None,
    bfloat16_kept: Collection[str] = frozenset(),
) -> Converted:
    """The state of an opened Hugging Face checkpoint, read one shard in memory at a time.

    The model is built (on the ``meta`` device) through the registry the checkpoint was opened
    with; no other registry is consulted. Under a wrapping converter the decoder's state is
    named under its section and copied under each copy's prefix.

    :param dtypes: the type each tensor is to have in the model it loads into (by its name
        here): each is converted as it is read, into memory of its own (not the file's), so
        that a model loading the state can keep these tensors rather than copy them, and no
        tensor of the file's type outlives its conversion.
    :param bfloat16_kept: names of ``dtypes`` whose tensor stays bfloat16 where the file holds
        it in bfloat16 (read as it is, into memory of its own, never converted): a model that
        may hold them in bfloat16 (:mod:`plugtrain.conversion.meta_build.bfloat16`) keeps them.
    :raises ConversionError: naming the tensor that does not convert, or the ones missing.
    """
    registry, converter, hf = opened.registry, opened.converter, opened.hf_config
    source, keys = opened.source, opened.model_keys
    complete = complete_model_keys(registry, converter.model, keys)
    layout = model_layout(registry, converter.model, keys)
    applier = RuleApplier(converter.weights, "hf", ConversionContext(hf, complete))
    state: dict[str, torch.Tensor] = {}
    owned: set[str] = set()
    kept = frozenset(bfloat16_kept)
    read_as, converted = _reading_as(applier, dtypes, kept)
    for name, tensor in iter_file_tensors(opened.weight_files, read_as):
        for target, made in applier.add(name, tensor):
            named = _PREFIX + target
            state[named] = _checked(made, named, layout, source)
            if dtypes is not None and named in dtypes:
                wanted = dtypes[named]
                if named in kept and made.dtype == torch.bfloat16:
                    wanted = torch.bfloat16
                if not (converted.pop(name, None) == named and made.dtype == wanted):
                    state[named] = made.to(wanted, copy=True)
                owned.add(named)
    applier.finish(drop_unmatched, str(source))
    if converter.is_headless:
        _make_head(state, converter, hf, complete, layout)
    for alias, owner in layout.aliases.items():
        if owner in state:
            state[alias] = state[owner]
    missing = [n for n in layout.shapes if n not in state]
    if missing and not drop_unmatched:
        shown = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise ConversionError(f"{source}: the checkpoint lacks {shown}")
    dropped = opened.dropped_config_keys
    if dropped:
        log.info(
            "config.json keys the %s converter does not use: %s",
            opened.converter_key,
            ", ".join(dropped),
        )
    if opened.wrapper is not None and opened.wrapper.wraps is not None:
        wraps = opened.wrapper.wraps
        state = {
            f"{prefix}.{name}": tensor
            for prefix in (wraps.section, *wraps.copies)
            for name, tensor in state.items()
        }
        keys = {wraps.section: {"name": converter.model, **keys}, **wraps.fixed}
    if opened.wrapper is not None:
        owned.clear()  # each tensor is under several names now
    return Converted(
        opened.converter_key, opened.model_name, keys, state, dropped, frozenset(owned)
    )


def _reading_as(
    applier: RuleApplier, dtypes: Mapping[str, torch.dtype] | None, kept: frozenset[str]
) -> tuple[ReadAs | None, dict[str, str]]:
    """How to read a file's tensors straight into the types they are wanted in.

    A tensor its rule only renames is read as the type of its model tensor (converted a
    piece at a time as it is read: one copy, never the file's type whole), or as it is when
    it is bfloat16 and ``kept``; the others keep the file's type for their rule's transform.
    Returned with what the reader did: the file's names read so, each with its model name.
    """
    converted: dict[str, str] = {}
    if dtypes is None:
        return None, converted

    def read_as(name: str, dtype: torch.dtype) -> torch.dtype:
        target = applier.renamed(name)
        wanted = dtypes.get(_PREFIX + target) if target is not None else None
        if wanted is None:
            return dtype
        converted[name] = _PREFIX + str(target)
        return dtype if dtype == torch.bfloat16 and converted[name] in kept else wanted

    return read_as, converted


def _checked(tensor: torch.Tensor, name: str, layout: ModelLayout, source: Path) -> torch.Tensor:
    expected = layout.shapes.get(name)
    if expected is None:
        raise ConversionError(f"{source}: makes {name}, which the model does not have")
    if tuple(tensor.shape) != expected:
        message = (
            f"{source}: {name} has shape {tuple(tensor.shape)}, the model's is {expected} "
            "(does config.json describe these weights?)"
        )
        raise ConversionError(message)
    return tensor


def _make_head(
    state: dict[str, torch.Tensor],
    converter: CheckpointConverter,
    hf: Mapping[str, Any],
    keys: Mapping[str, Any],
    layout: ModelLayout,
) -> None:
    head, embedding = (_PREFIX + n for n in converter.lm_head)
    if head in state or head in layout.aliases:
        return
    shape = layout.shapes[head]
    if hf.get("tie_word_embeddings", True) and embedding in state:
        state[head] = state[embedding].clone()
    else:
        generator = torch.Generator().manual_seed(0)
        dtype = state[embedding].dtype if embedding in state else torch.float32
        state[head] = torch.randn(shape, generator=generator).mul_(0.02).to(dtype)
    bias = head.removesuffix("weight") + "bias"
    if bias in layout.shapes and bias not in state:
        state[bias] = torch.zeros(layout.shapes[bias], dtype=state[head].dtype)


def _plugtrain_tensors(
    state: Mapping[str, torch.Tensor], skip: set[str]
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of ``state`` by their rule names (without ``model.``), less ``skip``."""
    for name, tensor in state.items():
        full = name if name.startswith(_PREFIX) else _PREFIX + name
        if full in skip or not isinstance(tensor, torch.Tensor):
            continue
        yield full.removeprefix(_PREFIX), tensor


def export_hf(
    state: Mapping[str, torch.Tensor],
    model_name: str,
    model_keys: Mapping[str, Any],
    output_dir: str | os.PathLike[str],
    *,
    tokenizer_dir: str | os.PathLike[str] | None = None,
    shard_size: str | int = "10GB",
    safetensors: bool = True,
    drop_unmatched: bool = False,
    registry: Registry | None = None,
) -> Path:
    """Write a plugtrain model's state as a Hugging Face folder (see the module).

    :param state: the model's state dict (names with or without the leading ``model.``).
    :param model_name: the converter key (``"llama"``; usually the model's name).
    :param model_keys: the run file's ``model:`` keys (``name`` may be among them).
    :param output_dir: the folder to create (it must not exist).
    :param tokenizer_dir: a tokenizer folder whose files are copied in.
    :param shard_size: the largest shard (``"10GB"``, ``"500MiB"`` or bytes).
    :param safetensors: write ``.safetensors`` shards (else ``pytorch_model-*.bin``).
    :raises ConversionError: naming what the Hugging Face architecture cannot hold.
    """
    registry = _registry(registry)
    key, converter = find_converter(registry, model_name, None)
    if converter.wraps is not None:
        section = converter.wraps.section
        inner, _ = wrapped_converter(registry, key, converter, keys=model_keys)
        prefix = section + "."
        decoder = {n.removeprefix(prefix): t for n, t in state.items() if n.startswith(prefix)}
        return export_hf(
            decoder,
            inner,
            model_keys[section],
            output_dir,
            tokenizer_dir=tokenizer_dir,
            shard_size=shard_size,
            safetensors=safetensors,
            drop_unmatched=drop_unmatched,
            registry=registry,
        )
    keys = {k: v for k, v in model_keys.items() if k != "name"}
    complete = complete_model_keys(registry, converter.model, keys)
    if converter.fold_mup is not None:
        state, complete = converter.fold_mup(dict(state), complete)
    defaults = model_defaults(registry, converter.model)
    hf = plugtrain_to_hf_config(converter, complete, defaults, converter.plugtrain_handled)
    layout = model_layout(registry, converter.model, complete)
    skip = set(layout.aliases)
    if converter.is_headless:
        head = _PREFIX + converter.lm_head[0]
        skip |= {head, head.removesuffix("weight") + "bias"}
    applier = RuleApplier(converter.weights, "plugtrain", ConversionContext(hf, complete))
    dtype = None
    expected = {n.removeprefix(_PREFIX) for n in layout.shapes if n not in skip}
    with ShardedWriter(output_dir, parse_size(shard_size), safetensors) as writer:
        for name, tensor in _plugtrain_tensors(state, skip):
            expected.discard(name)
            for target, made in applier.add(name, tensor):
                if made.is_floating_point() and dtype is None:
                    dtype = made.dtype
                writer.add(target, made)
        missing = sorted(expected)
        if missing and not drop_unmatched:
            more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
            message = f"the plugtrain checkpoint lacks {', '.join(missing[:8])}{more}"
            raise ConversionError(message)
        dropped = applier.finish(drop_unmatched, "the plugtrain checkpoint")
        if dropped:
            log.warning("left out of the export (no rule matches): %s", ", ".join(dropped))
        hf["tie_word_embeddings"] = bool(hf.get("tie_word_embeddings", False))
        if dtype is not None:
            hf["dtype"] = str(dtype).removeprefix("torch.")
        _write_json(writer.staged("config.json"), hf)
        _copy_tokenizer(writer, tokenizer_dir, hf)
    if converter.hf_parts:
        _split_into_parts(Path(output_dir), converter.hf_parts, shard_size, safetensors)
    log.info("wrote %s (%s converter)", output_dir, key)
    return Path(output_dir)


def _split_into_parts(
    folder: Path, parts: Mapping[str, str], shard_size: str | int, safetensors: bool
) -> None:
    """Move the tensors named ``<part>.…`` of an exported folder into ``folder/<part>/``.

    Each sub-folder also gets the folder's other files and a ``config.json`` naming its
    architecture.
    """
    whole = folder.with_name(f".{folder.name}.whole-{os.getpid()}-{secrets.token_hex(4)}")
    os.rename(folder, whole)
    config = json.loads((whole / "config.json").read_text(encoding="utf-8"))
    tensors = dict(iter_hf_tensors(whole))
    others = [p for p in whole.iterdir() if p.is_file() and "model" not in p.name]
    folder.mkdir()
    for part, architecture in parts.items():
        with ShardedWriter(folder / part, parse_size(shard_size), safetensors) as writer:
            for name, tensor in tensors.items():
                if name.startswith(part + "."):
                    writer.add(name, tensor)
            for file in others:
                shutil.copyfile(file, writer.staged(file.name))
            _write_json(writer.staged("config.json"), {**config, "architectures": [architecture]})
    shutil.rmtree(whole)


def hf_weight_names(
    state: Mapping[str, torch.Tensor],
    model_name: str,
    model_keys: Mapping[str, Any],
    registry: Registry | None = None,
    names: Iterable[str] | None = None,
) -> dict[str, tuple[str, torch.Tensor | None]]:
    """The Hugging Face name and row order of each 2-D tensor exported with its rows reordered.

    ``export[i] == tensor[order[i]]``; the order is ``None`` for a tensor exported unchanged.
    A fused, split, transposed or rescaled tensor is left out: what a per-layer adapter (whose
    ``B`` has one row per output row) can be renamed and reordered by.

    :param names: only these tensors of ``state`` (default: all). A name ``state`` lacks (the
        base weight of an adapter-only checkpoint) is measured on a seeded stand-in of the
        shape the model gives it: the order depends on the shape alone.
    """
    registry = _registry(registry)
    _, converter = find_converter(registry, model_name, None)
    keys = {k: v for k, v in model_keys.items() if k != "name"}
    complete = complete_model_keys(registry, converter.model, keys)
    defaults = model_defaults(registry, converter.model)
    hf = plugtrain_to_hf_config(converter, complete, defaults, converter.plugtrain_handled)
    applier = RuleApplier(converter.weights, "plugtrain", ConversionContext(hf, complete))
    wanted = None if names is None else set(names)
    chosen = {n: t for n, t in state.items() if wanted is None or n in wanted}
    absent = sorted((wanted or set()) - set(chosen))
    if absent:
        shapes = model_layout(registry, converter.model, complete).shapes
        generator = torch.Generator().manual_seed(0)
        for name in absent:
            full = name if name.startswith(_PREFIX) else _PREFIX + name
            if full in shapes:
                chosen[name] = torch.randn(shapes[full], generator=generator)
    found: dict[str, tuple[str, torch.Tensor | None]] = {}
    for name, tensor in _plugtrain_tensors(chosen, set()):
        rows = torch.zeros(tensor.shape, dtype=torch.float32)
        if tensor.ndim == 2:
            rows[:, 0] = torch.arange(tensor.shape[0], dtype=torch.float32)
        try:
            made = applier.add(name, tensor)
            if tensor.ndim != 2 or len(made) != 1 or made[0][1].shape != tensor.shape:
                continue
            order = applier.add(name, rows)[0][1][:, 0].round().long()
        except (RuntimeError, ValueError, IndexError, ConversionError):
            continue  # a transform that cannot take it: not exported row by row
        if torch.equal(made[0][1], tensor[order]):
            unchanged = torch.equal(order, torch.arange(tensor.shape[0]))
            found[_PREFIX + name] = (made[0][0], None if unchanged else order)
    return found


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _copy_tokenizer(
    writer: ShardedWriter, tokenizer_dir: str | os.PathLike[str] | None, hf: dict[str, Any]
) -> None:
    generation: dict[str, Any] = {"_from_model_config": True}
    if tokenizer_dir is not None:
        folder = Path(tokenizer_dir)
        if not folder.is_dir():
            raise ConversionError(f"{folder}: the tokenizer folder does not exist")
        copied = _copy_files(folder, writer.staged(""), TOKENIZER_FILES)
        if not copied:
            raise ConversionError(
                f"{folder}: holds no tokenizer files ({', '.join(TOKENIZER_FILES)})"
            )
        generation.update(_special_token_ids(folder))
        generation.update(_config_token_ids(folder))
        hf.update({k: v for k, v in generation.items() if k.endswith("token_id")})
        _write_json(writer.staged("config.json"), hf)
        if (folder / "generation_config.json").is_file():
            return
    _write_json(writer.staged("generation_config.json"), generation)


def _copy_files(source: Path, target: Path, names: Iterable[str]) -> list[str]:
    copied = []
    for name in names:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
            copied.append(name)
    return copied


def _config_token_ids(folder: Path) -> dict[str, Any]:
    """The bos/eos/pad ids of the model folder's ``config.json`` (an eos list kept a list)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found: dict[str, Any] = {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = config.get(key) if isinstance(config, Mapping) else None
        if isinstance(value, int) or (
            isinstance(value, list) and value and all(isinstance(v, int) for v in value)
        ):
            found[key] = value
    return found


def _special_token_ids(folder: Path) -> dict[str, int]:
    """``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` of a tokenizer folder, where known."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        vocabulary = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    ids = {t["content"]: t["id"] for t in vocabulary.get("added_tokens", [])}
    model_vocab = vocabulary.get("model", {}).get("vocab")
    if isinstance(model_vocab, dict):
        ids = {**model_vocab, **ids}
    found = {}
    for role in ("bos", "eos", "pad"):
        token = config.get(f"{role}_token")
        if isinstance(token, Mapping):
            token = token.get("content")
        if isinstance(token, str) and token in ids:
            found[f"{role}_token_id"] = int(ids[token])
    return found
