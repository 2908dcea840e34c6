"""``plugtrain checkpoint convert --src-fmt --tgt-fmt``, ``convert-config`` and ``list-converters``.

Hugging Face <-> plugtrain, Model Zoo's spelling. Listing and ``convert-config`` import no torch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

import yaml

from plugtrain.commands import EXIT_OK
from plugtrain.conversion.declaration import ConversionError
from plugtrain.conversion.files import (
    check_formats,
    data_tokenizer_folder,
    hf_source_file,
    model_section,
    output_stem,
    tokenizer_folder,
)
from plugtrain.conversion.from_config import with_config_keys
from plugtrain.conversion.lookup import KIND, converters, find_converter, wrapped_converter
from plugtrain.conversion.writing import remove_stale_partials, write_converted
from plugtrain.registry.components import Registry

__all__ = ["convert_config", "convert_formats", "list_converters"]


def _model_yaml(name: str, keys: dict[str, Any]) -> str:
    header = (
        f"# The model section of a plugtrain run file (trainer.init.model), converted from a\n"
        f"# Hugging Face config by plugtrain's {name!r} converter.\n"
    )
    return header + yaml.safe_dump({"model": {"name": name, **keys}}, sort_keys=False)


def _written_name(registry: Registry, asked: str | None, model: str) -> str:
    """The model name a converted section carries: ``--model``'s when it names a model.

    ``--model gpt3`` reads with the gpt2 converter (an alias), and the section says ``gpt3``;
    a converter key that is no model's name (``gpt2-headless``) gives the converter's model.
    """
    if asked is not None and asked != model and asked in registry.names("model"):
        return asked
    return model


def convert_formats(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """Convert a checkpoint between ``hf`` and ``plugtrain`` (see the module)."""
    source_format, target_format = check_formats(args.src_fmt, args.tgt_fmt)
    if args.config is None:
        raise SystemExit("plugtrain checkpoint convert: --config is required with --src-fmt")
    source = Path(args.source)
    if source_format == "hf":
        return _hf_to_plugtrain(args, registry, source, out)
    if target_format == "hf-peft":
        return _plugtrain_to_adapter(args, registry, source, out)
    return _plugtrain_to_hf(args, registry, source, out)


def _hf_to_plugtrain(
    args: argparse.Namespace, registry: Registry, source: Path, out: TextIO
) -> int:
    from plugtrain.conversion import open_checkpoint, read_checkpoint
    from plugtrain.train.checkpointing import save_checkpoint

    weights = hf_source_file(source)
    output = Path(args.output_dir) if args.output_dir else weights.parent
    checkpoint = output / f"{output_stem(weights)}_to_plugtrain.mdl"
    config = output / f"{output_stem(args.config)}_to_plugtrain.yaml"
    remove_stale_partials(checkpoint)
    for existing in (checkpoint, config):
        if existing.exists():
            message = f"{existing}: already exists (choose a new output folder, or remove it)"
            raise ConversionError(message)
    opened = open_checkpoint(weights, registry, converter=args.model, config=args.config)
    converted = read_checkpoint(opened, drop_unmatched=args.drop_unmatched_keys)
    name = _written_name(registry, args.model, converted.model_name)
    text = _model_yaml(name, converted.model_keys)
    write_converted(
        checkpoint, config, text, lambda path: save_checkpoint(path, {"model": converted.state})
    )
    if converted.dropped_config_keys:
        out.write(f"config.json keys not used: {', '.join(converted.dropped_config_keys)}\n")
    out.write(f"{source} -> {checkpoint}\n{args.config} -> {config}\n")
    return EXIT_OK


def _plugtrain_to_hf(
    args: argparse.Namespace, registry: Registry, source: Path, out: TextIO
) -> int:
    from plugtrain.conversion.engine import export_hf
    from plugtrain.conversion.plugtrain_files import read_model_state, read_started_from

    name, keys, data = model_section(args.config)
    model = args.model or name
    if model is None:
        raise SystemExit(f"{args.config}: the model has no name: pass --model")
    keys = with_config_keys(registry, model, keys)
    state = read_model_state(source)
    started = read_started_from(source)
    for callback, arguments in _state_changers(data, registry, "fold_for_export"):
        try:
            state, keys = callback.fold_for_export(state, arguments, model, keys, source)
        except ValueError as exc:
            raise ConversionError(str(exc)) from exc
    output = Path(args.output_dir) if args.output_dir else source.parent
    target = output / f"{output_stem(source)}_to_hf"
    base = Path(args.config).parent
    tokenizer = (
        args.tokenizer
        or _with_tokenizer(started)
        or tokenizer_folder(data, base)
        or data_tokenizer_folder(data, base)
    )
    export_hf(
        state,
        model,
        keys,
        target,
        tokenizer_dir=tokenizer,
        shard_size=args.hf_shard_size,
        safetensors=not args.export_bin,
        drop_unmatched=args.drop_unmatched_keys,
        registry=registry,
    )
    out.write(f"{source} -> {target}\n")
    if tokenizer is None:
        out.write("no tokenizer folder named (--tokenizer DIR adds its files)\n")
    return EXIT_OK


def _with_tokenizer(folder: Path | None) -> Path | None:
    """``folder`` (the Hugging Face folder a run started from) when it holds a tokenizer."""
    if folder is None:
        return None
    names = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
    return folder if any((folder / n).is_file() for n in names) else None


def _state_changers(data: Any, registry: Registry, method: str) -> list[tuple[Any, Any]]:
    """The run file's callbacks whose class declares ``method`` (LoRA's adapters), with arguments.

    A callback that changes the model's state (adds adapters) declares how to export it:
    ``fold_for_export(state, arguments, model, keys, source) -> (state, keys)`` and
    ``export_adapter(state, arguments, hf_name, output_dir, source)``, ``hf_name`` giving a weight's
    Hugging Face name and row order (``None``: it does not export row by row).
    """
    trainer = data.get("trainer") if isinstance(data, dict) else None
    if isinstance(trainer, list) and len(trainer) == 1:
        trainer = trainer[0].get("trainer", trainer[0])
    init = (trainer or {}).get("init") if isinstance(trainer, dict) else None
    found = []
    for entry in (init or {}).get("callbacks") or []:
        if isinstance(entry, dict) and len(entry) == 1:
            ((name, arguments),) = entry.items()
            callback = registry.resolve("callback", name)
            if callable(getattr(callback, method, None)):
                found.append((callback, arguments or {}))
    return found


def _plugtrain_to_adapter(
    args: argparse.Namespace, registry: Registry, source: Path, out: TextIO
) -> int:
    """``--tgt-fmt hf-peft``: the adapters of the run file's callback, in PEFT's files."""
    from plugtrain.conversion.engine import hf_weight_names
    from plugtrain.conversion.plugtrain_files import read_model_state

    name, keys, data = model_section(args.config)
    model = args.model or name
    if model is None:
        raise SystemExit(f"{args.config}: the model has no name: pass --model")
    keys = with_config_keys(registry, model, keys)
    changers = _state_changers(data, registry, "export_adapter")
    if not changers:
        message = f"{args.config}: names no callback with adapters to export (a Lora callback)"
        raise ConversionError(message)
    state = read_model_state(source)

    def hf_name(name: str) -> Any:
        found = hf_weight_names(state, model, keys, registry=registry, names=[name])
        return found.get(name)

    output = Path(args.output_dir) if args.output_dir else source.parent
    target = output / f"{output_stem(source)}_to_hf-peft"
    callback, arguments = changers[0]
    try:
        callback.export_adapter(state, arguments, hf_name, target, source)
    except ValueError as exc:
        raise ConversionError(str(exc)) from exc
    out.write(f"{source} -> {target}\n")
    return EXIT_OK


def convert_config(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``convert-config``: a ``config.json`` to a model YAML or back (torch-free)."""
    from plugtrain.conversion.configs import (
        hf_to_plugtrain_config,
        plugtrain_to_hf_config,
        read_hf_config,
    )
    from plugtrain.conversion.lookup import complete_model_keys, model_defaults

    source_format, _ = check_formats(args.src_fmt, args.tgt_fmt)
    config = Path(args.config)
    output = Path(args.output_dir) if args.output_dir else config.parent
    output.mkdir(parents=True, exist_ok=True)
    if source_format == "hf":
        hf = read_hf_config(config)
        key, converter = find_converter(registry, args.model, hf)
        written = _written_name(registry, args.model, converter.model)
        wraps = converter.wraps
        if wraps is not None:
            _, converter = wrapped_converter(registry, key, converter, hf=hf)
        keys, dropped = hf_to_plugtrain_config(converter, hf)
        complete_model_keys(registry, converter.model, keys)
        if wraps is not None:
            keys = {wraps.section: {"name": converter.model, **keys}, **wraps.fixed}
        target = output / f"{output_stem(config)}_to_plugtrain.yaml"
        target.write_text(_model_yaml(written, keys), encoding="utf-8")
        if dropped:
            out.write(f"config.json keys not used: {', '.join(dropped)}\n")
    else:
        name, keys, _ = model_section(config)
        key, converter = find_converter(registry, args.model or name, None)
        keys = with_config_keys(registry, args.model or name or converter.model, keys)
        if converter.wraps is not None:
            section = converter.wraps.section
            _, converter = wrapped_converter(registry, key, converter, keys=keys)
            keys = {k: v for k, v in keys[section].items() if k != "name"}
        complete = complete_model_keys(registry, converter.model, keys)
        defaults = model_defaults(registry, converter.model)
        hf = plugtrain_to_hf_config(converter, complete, defaults, converter.plugtrain_handled)
        target = output / f"{output_stem(config)}_to_hf.json"
        target.write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    out.write(f"{config} -> {target}\n")
    return EXIT_OK


def list_converters(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``list-converters [MODEL]``: each converter's key, aliases, formats and architecture."""
    found = converters(registry)
    if args.model is not None:
        component = registry.lookup(KIND, args.model)
        found = {component.name: found[component.name]}
    for key, converter in found.items():
        aliases = registry.lookup(KIND, key).aliases
        also = f" (also {', '.join(aliases)})" if aliases else ""
        formats = " <-> ".join(converter.formats)
        out.write(
            f"{key}{also}: {formats}; model {converter.model!r}, "
            f"Hugging Face {converter.hf_architecture}\n"
        )
        if converter.note and not args.hide_notes:
            out.write(f"    {converter.note}\n")
    return EXIT_OK
