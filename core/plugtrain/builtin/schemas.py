"""Argument schemas of the built-in models and data loaders (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from plugtrain.registry.schema import arg


@attrs.frozen
class MLPArgs:
    """A multi-layer perceptron: Linear layers with ReLU between them, for classification."""

    in_features: int = arg(help="size of each input vector", gt=0)
    out_features: int = arg(help="number of classes (size of the output)", gt=0)
    hidden: int = arg(128, help="width of each hidden layer", gt=0)
    depth: int = arg(1, help="number of hidden layers", ge=0)
    dropout: float = arg(0.0, help="dropout probability after each hidden layer", ge=0, lt=1)
    layer_norm: bool = arg(False, help="apply LayerNorm before each activation")


@attrs.frozen
class SyntheticArgs:
    """Seeded random classification data: normal inputs, labels from a fixed linear map."""

    batch_size: int = arg(help="examples per batch", gt=0)
    num_examples: int = arg(1024, help="size of the data set", gt=0)
    in_features: int = arg(64, help="size of each input vector", gt=0)
    num_classes: int = arg(10, help="number of classes", gt=1)
    split: Literal["train", "val"] = arg("train", help="which split (different seeds)")
    shuffle: bool | None = arg(None, help="shuffle each epoch (default: only the train split)")
    seed: int = arg(0, help="seed of the data (not of the shuffling)", ge=0)
    drop_last: bool = arg(False, help="drop the last incomplete batch")


@attrs.frozen
class DigitsArgs:
    """The 8x8 handwritten digits (1,797 images, 10 classes), shipped with plugtrain.

    A seeded split holds ``val_fraction`` of the images out for evaluation; pixels are scaled to
    [0, 1] and flattened to 64 features.
    """

    batch_size: int = arg(help="examples per batch", gt=0)
    split: Literal["train", "val", "all"] = arg("train", help="which part of the data")
    val_fraction: float = arg(0.2, help="share of the images in the val split", gt=0, lt=1)
    shuffle: bool | None = arg(None, help="shuffle each epoch (default: only the train split)")
    seed: int = arg(0, help="seed of the split and of the shuffling", ge=0)
    drop_last: bool = arg(False, help="drop the last incomplete batch")


@attrs.frozen
class ProgressLoggerArgs:
    """The progress display: a bar on a terminal, log lines otherwise (logging.progress)."""


@attrs.frozen
class ThroughputArgs:
    """Tokens/s, samples/s, FLOP/s and MFU in each training record.

    On by default for models whose batches hold tokens; ``Throughput: null`` removes it.
    """

    peak_flops: float | None = arg(
        None,
        help="the device's peak FLOP/s for MFU (None: the backend's, the known-GPU table, or a "
        "cached matmul probe on a CPU)",
        gt=0,
    )
    mfu: bool = arg(True, help="count the model's FLOPs once and report FLOP/s and MFU")


@attrs.frozen
class MetricsFilesLoggerArgs:
    """metrics.jsonl and metrics.csv in model_dir; a resumed fit drops the replayed rows."""


@attrs.frozen
class StdlibTextArgs:
    """Byte-level language-model batches of the Python standard library's own source files.

    No download: the running Python's top-level stdlib modules, in name order, up to
    ``max_bytes``; a seeded split of ``block_size`` blocks holds ``val_fraction`` out.
    """

    batch_size: int = arg(help="sequences per batch", gt=0)
    block_size: int = arg(128, help="tokens (bytes) per sequence", gt=0)
    split: Literal["train", "val"] = arg("train", help="which part of the blocks")
    val_fraction: float = arg(0.1, help="share of the blocks in the val split", gt=0, lt=1)
    max_bytes: int = arg(1_000_000, help="size of the corpus in bytes", gt=0)
    shuffle: bool | None = arg(None, help="shuffle each epoch (default: only the train split)")
    seed: int = arg(0, help="seed of the split and of the shuffling", ge=0)
    drop_last: bool = arg(False, help="drop the last incomplete batch")

    @staticmethod
    def data_vocabulary(arguments: Mapping[str, Any]) -> tuple[int, str]:
        """The token ids the batches hold: bytes, 0 to 255 (``plugtrain check`` compares it)."""
        return 256, "StdlibText's byte-level tokens"
