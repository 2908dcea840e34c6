"""A decoder's Linear and Embedding layers from its settings alone, for ``plugtrain check``.

Torch-free: each layer's module name, class-name path (plugtrain's class names and Model Zoo's,
root first) and weight shape, as the modules of :mod:`plugtrain_models.decoder` build them
(``tests/test_lora_check.py`` compares this with the built model, layer by layer).
"""

from __future__ import annotations

from collections.abc import Iterator

from plugtrain_models.lora.targets import class_names
from plugtrain_models.settings import DecoderSettings

__all__ = ["TreeLayer", "decoder_layers"]

TreeLayer = tuple[str, tuple[str, ...], tuple[int, int]]
"""A layer's module name, class-name path and weight shape (``[out, in]``, or a table's)."""


def _path(*classes: str) -> tuple[str, ...]:
    return tuple(name for own in classes for name in class_names(own))


def _stack(name: str, s: DecoderSettings, path: tuple[str, ...]) -> Iterator[TreeLayer]:
    """The two FFN layers ``0`` and ``1`` under ``name`` (an ``nn.Sequential``)."""
    first = (*path, *_path("Sequential", "FFNLayer", "Linear"))
    yield f"{name}.0.linear_layer", first, (s.filter_size, s.hidden_size)
    if s.glu:
        yield f"{name}.0.linear_layer_for_glu", first, (s.filter_size, s.hidden_size)
    yield f"{name}.1.linear_layer", first, (s.hidden_size, s.filter_size)


def _ffn(name: str, s: DecoderSettings, path: tuple[str, ...]) -> Iterator[TreeLayer]:
    if s.moe is None:
        yield from _stack(f"{name}.ffn", s, (*path, *_path("FeedForward")))
        return
    moe = (*path, *_path("MixtureOfExperts"))
    yield f"{name}.gate", (*moe, *_path("Linear")), (s.moe.num_experts, s.hidden_size)
    experts = (*moe, *_path("Experts", "ModuleList"))
    for index in range(s.moe.num_experts):
        yield from _stack(f"{name}.experts.experts.{index}", s, experts)
    for index in range(s.moe.num_shared_experts):
        shared = (*experts, *_path("FeedForward"))
        yield from _stack(f"{name}.experts.shared_experts.{index}.ffn", s, shared)


def decoder_layers(s: DecoderSettings, root: str = "DecoderLM") -> list[TreeLayer]:
    """Every Linear and Embedding layer of the decoder ``s`` describes (see the module)."""
    top = _path(root, "LanguageModel")
    embedding = (*top, *_path("EmbeddingLayer"))
    layers: list[TreeLayer] = [
        (
            "model.embedding_layer.word_embeddings",
            (*embedding, *_path("Embedding")),
            (s.vocab_size, s.hidden_size),
        )
    ]
    if s.positions == "learned":
        where = (*embedding, *_path("LearnedPositions", "Embedding"))
        layers.append(
            (
                "model.embedding_layer.position_embeddings.embed",
                where,
                (s.max_positions, s.hidden_size),
            )
        )
    block = (*top, *_path("TransformerDecoder", "ModuleList", "DecoderLayer"))
    attention = (*block, *_path("Attention", "Linear"))
    kv_width = s.num_kv_groups * s.head_dim
    for index in range(s.num_layers):
        name = f"model.transformer_decoder.layers.{index}"
        for projection, shape in (
            ("q", (s.inner_dim, s.hidden_size)),
            ("k", (kv_width, s.hidden_size)),
            ("v", (kv_width, s.hidden_size)),
            ("output", (s.hidden_size, s.inner_dim)),
        ):
            layers.append((f"{name}.self_attn.proj_{projection}_dense_layer", attention, shape))
        layers.extend(_ffn(f"{name}.ffn", s, block))
    layers.append(("model.lm_head", (*top, *_path("Linear")), (s.vocab_size, s.hidden_size)))
    return layers
