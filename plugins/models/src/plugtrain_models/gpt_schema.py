"""``GPT``: plugtrain's small GPT-2-style model, as a configuration of the decoder (torch-free).

``GPT`` keeps the keys it had as the core's built-in model (``n_layer``, ``n_embd``, ...);
:func:`decoder_arguments` turns them into the GPT-2 path's Model Zoo keys: learned positions,
pre-norm LayerNorm (biasless when ``bias: false``), a GELU FFN of width ``4 * n_embd``, causal
scaled dot-product attention, weight tying, and GPT-2's initialisation (normal with standard
deviation 0.02, the residual output projections ``0.02 / sqrt(2 * n_layer)``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain.schema import Problem, about, arg

__all__ = ["GPT_INIT_STD", "GPTArgs", "decoder_arguments"]

GPT_INIT_STD = 0.02
"""GPT-2's initialisation standard deviation."""


@attrs.frozen
class GPTArgs:
    """A decoder-only transformer language model (GPT-2's architecture) with its own loss.

    Batches are ``{input_ids, labels}`` mappings (``StdlibText`` makes them; a label ``-100`` is
    not scored); it returns the mean cross-entropy per token, the next-token accuracy and the
    token count. Parameters carry Model Zoo's names (``model.transformer_decoder.layers.N...``).
    """

    vocab_size: int = arg(256, help="number of token ids (256: bytes)", gt=0)
    n_layer: int = arg(4, help="number of transformer blocks", gt=0)
    n_head: int = arg(4, help="attention heads per block (divides n_embd)", gt=0)
    n_embd: int = arg(128, help="width of the embeddings and of each block", gt=0)
    block_size: int = arg(128, help="longest sequence (number of position embeddings)", gt=0)
    dropout: float = arg(
        0.0, help="dropout probability (embeddings, attention, blocks)", ge=0, lt=1
    )
    bias: bool = arg(True, help="biases in the Linear and LayerNorm layers")
    tie_weights: bool = arg(True, help="share the token embedding with lm_head")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """``n_embd`` must split evenly into ``n_head`` heads."""
        if arguments["n_embd"] % arguments["n_head"]:
            message = (
                f"n_embd ({arguments['n_embd']}) must be a multiple of "
                f"n_head ({arguments['n_head']})"
            )
            yield about(("n_head", "n_embd"), message)


def _normal(std: float) -> dict[str, Any]:
    return {"name": "normal", "mean": 0.0, "std": std}


def decoder_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The GPT-2 path's keys for ``GPT``'s validated keys (every field present)."""
    width, layers, bias = arguments["n_embd"], arguments["n_layer"], arguments["bias"]
    dropout = arguments["dropout"]
    return {
        "vocab_size": arguments["vocab_size"],
        "hidden_size": width,
        "num_hidden_layers": layers,
        "num_heads": arguments["n_head"],
        "filter_size": 4 * width,
        "max_position_embeddings": arguments["block_size"],
        "position_embedding_type": "learned",
        "nonlinearity": "gelu",
        "norm_type": "layernorm" if bias else "biasless-layernorm",
        "layer_norm_epsilon": 1e-5,
        "share_embedding_weights": arguments["tie_weights"],
        "use_ffn_bias": bias,
        "use_projection_bias_in_attention": bias,
        "use_ffn_bias_in_attention": bias,
        "use_bias_in_output": False,
        "dropout_rate": dropout,
        "attention_dropout_rate": dropout,
        "embedding_dropout_rate": dropout,
        "attention_type": "scaled_dot_product",
        "loss_scaling": "num_tokens",
        "initializer_range": GPT_INIT_STD,
        "initializer": _normal(GPT_INIT_STD),
        "embedding_initializer": _normal(GPT_INIT_STD),
        "output_layer_initializer": _normal(GPT_INIT_STD / math.sqrt(2 * layers)),
    }
