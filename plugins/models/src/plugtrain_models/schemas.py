"""Argument schemas of the decoder families (torch-free: ``check`` reads them).

Model Zoo 2.10 has two decoder implementations with one key surface each: the GPT-2 path
(gpt3, llama, jais, mixtral, starcoder, gemma2, btlm, mistral, bloom, santacoder, gpt2) and the
GPT-J path (gptj, falcon, gpt-neox). Every family name validates against its path's schema; the
keys, defaults and rules are Model Zoo 2.10's. Numbers may be written as strings
(``layer_norm_epsilon: 1e-05`` is a string to YAML 1.1), as Model Zoo's pydantic coerces them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import attrs

from plugtrain.schema import Problem, arg
from plugtrain_models.rules import gpt2_path_problems, gptj_path_problems

__all__ = ["GPT2_FAMILIES", "GPTJ_FAMILIES", "Gpt2PathArgs", "GptjPathArgs", "schema_for"]

Real = float | str
"""A number, or a string holding one (coerced, as Model Zoo's pydantic does)."""
Initializer = str | dict[str, Any] | None
"""An initializer: a bare name or ``{name: ..., args}``."""

CSX_ONLY = "it only matters on Cerebras CSX systems; CPU/GPU compute it in float32 exactly"


@attrs.frozen
class _SharedArgs:
    """The keys both decoder paths take, in Model Zoo's order where it has one."""

    vocab_size: int = arg(50257, help="number of token ids", ge=1, le=512000)
    hidden_size: int = arg(768, help="width of the residual stream (H)", gt=0)
    num_hidden_layers: int = arg(12, help="number of decoder layers (L)", gt=0)
    num_heads: int = arg(12, help="attention heads (divides H and the inner dim)", gt=0)
    filter_size: int = arg(3072, help="FFN width (per branch for GLU nonlinearities)", gt=0)
    max_position_embeddings: int = arg(1024, help="longest sequence", gt=0)
    nonlinearity: str = arg("gelu", help="FFN activation; *glu names gate linear_layer_for_glu")
    layer_norm_epsilon: Real = arg(1e-5, help="epsilon of every norm")
    share_embedding_weights: bool = arg(True, help="lm_head is the token embedding")
    use_projection_bias_in_attention: bool = arg(True, help="q, k, v projection biases")
    use_ffn_bias_in_attention: bool = arg(True, help="attention output projection bias")
    attention_dropout_rate: Real | None = arg(
        0.1, help="on attention probabilities; null: dropout_rate"
    )
    attention_type: Literal["dot_product", "scaled_dot_product"] = arg(
        "scaled_dot_product", help="scaled_dot_product divides q.k by sqrt(head_dim)"
    )
    use_bias_in_output: bool = arg(False, help="a bias on lm_head (zero at init)")
    loss_scaling: Literal["num_tokens", "batch_size"] = arg(
        "num_tokens", help="divide the masked loss sum by the token count or the batch size"
    )
    loss_weight: Real = arg(1.0, help="multiplies the loss under loss_scaling: batch_size")
    initializer: Initializer = arg(None, help="attention and FFN-input weights")
    embedding_initializer: Initializer = arg(None, help="token and position tables")
    output_layer_initializer: Initializer = arg(None, help="output projections")
    initializer_range: Real = arg(0.02, help="std of the default truncated normal")
    rotary_dim: int | None = arg(None, help="rotated dims per head (even); null: head_dim/4", gt=0)
    rope_theta: Real = arg(10000.0, help="RoPE base")
    attention_module: Literal["aiayn_attention", "multiquery_attention"] = arg(
        "aiayn_attention", help="multiquery_attention: grouped k/v (num_kv_groups)"
    )
    extra_attention_params: dict[str, Any] = arg({}, help="{num_kv_groups: n}")
    norm_type: str = arg("layernorm", help="layernorm, rmsnorm or biasless-layernorm")
    embeddings_scale: Real | None = arg(1.0, help="multiplies the embeddings")
    mup_base_hidden_size: Real | None = arg(None, help="muP base width (with the filter one)")
    mup_base_filter_size: Real | None = arg(None, help="muP base FFN width")
    output_logits_alpha: Real | None = arg(None, help="muP logits multiplier (1 when null)")
    pos_scaling_factor: Real = arg(1.0, help="RoPE/ALiBi position scaling factor")
    pos_scaling_type: str = arg("linear", help="linear or llama3 RoPE scaling")
    pos_scaling_extra_args: dict[str, Any] | None = arg(None, help="llama3 factors")
    attention_sliding_window_length: int | None = arg(None, help="keys per query", gt=0)
    attention_logits_alpha: Real | None = arg(1.0, help="multiplies the attention scores")
    attention_sink_tokens: int | None = arg(None, help="keys exempt from the window", ge=0)
    alibi_trainable_slopes: bool = arg(False, help="train the ALiBi slopes")
    moe: dict[str, Any] | None = arg(None, help="mixture of experts", aliases=("moe_params",))
    # CSX-only: accepted, warned about and dropped by the checker (ignored_arguments).
    attention_softmax_fp32: bool = arg(True, help=f"no effect: {CSX_ONLY}")
    attention_kernel: str | None = arg(None, help=f"no effect: {CSX_ONLY}")
    fold_rope_consts: bool = arg(False, help=f"no effect: {CSX_ONLY}")
    # Accepted so that files validate; a non-default value is "not supported" (rules).
    num_relative_attention_buckets: int = arg(32, help="relative positions (not supported)")
    lr_adjustment_groups: dict[str, Any] | None = arg(None, help="not supported")
    dtype: str | None = arg(None, help="not supported")
    start_token: int | list[int] | None = arg(
        None, help="generation: the id padding shorter prompts on the left (plugtrain generate)"
    )
    stop_sequences: list[Any] | None = arg(
        None, help="generation: token ids (or lists of them) that end a prompt's output"
    )
    max_tokens: int | None = arg(None, gt=0, help="generation: new tokens per prompt (default 64)")
    loop_dim: int = arg(1, help="Cerebras inference loop dimension (no effect)")
    temperature: Real | None = arg(None, help="generation: sampling temperature (else greedy)")
    top_k: int | None = arg(None, help="generation: sample among the k likeliest (100 if unset)")
    top_p: Real | None = arg(None, help="generation: sample from this share of probability")
    compute_eval_metrics: bool = arg(True, help="accuracy and perplexity in evaluation")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "attention_softmax_fp32": CSX_ONLY,
        "attention_kernel": CSX_ONLY,
        "fold_rope_consts": "constant folding on CSX; the exact formula is used",
    }


@attrs.frozen
class Gpt2PathArgs(_SharedArgs):
    """A Model Zoo decoder on the GPT-2 path: sequential pre-norm blocks."""

    position_embedding_type: Literal["learned", "fixed", "rotary", "alibi", "relative"] | None = (
        arg("learned", help="how positions enter: learned table, fixed, rotary, alibi")
    )
    use_ffn_bias: bool = arg(True, help="FFN biases")
    dropout_rate: Real = arg(0.1, help="residual and FFN dropout")
    embedding_dropout_rate: Real | None = arg(
        None, help="after the embeddings; null: dropout_rate", aliases=("embd_pdrop",)
    )
    scale_qk_dot_by_d: bool | None = arg(None, help="divide q.k by d, not sqrt(d); null: muP")
    embedding_layer_norm: bool = arg(False, help="a norm on the embeddings (embedding_ln_f)")
    attention_inner_dim: int | None = arg(None, help="q and output width (null: H)", gt=0)
    boundary_casting: bool = arg(False, help=f"no effect: {CSX_ONLY}")
    scale_qk_dot_by_layer_idx: bool = arg(False, help="divide layer N's scores by N+1")
    attention_logit_softcapping: Real | None = arg(None, help="cap*tanh(scores/cap)")
    final_logit_softcapping: Real | None = arg(None, help="cap*tanh(logits/cap)")
    norm_first_sandwich: bool = arg(False, help="norm1_post/norm3_post after attn and FFN")
    sliding_window_every_other_decoder_layer: bool = arg(False, help="window on alternate layers")
    sliding_window_every_other_decoder_layer_pattern: Literal[
        "full_attention_first", "sliding_window_first"
    ] = arg("full_attention_first", help="which layer parity gets the window")
    output_logits_scale: Real | None = arg(None, help="multiplies the logits (pre-2.3 muP)")
    scale_output_logits_by_d: bool = arg(True, help="muP logits scale 1/w (false: 1/sqrt(w))")
    num_extra_input_vocab_tokens: int = arg(0, help="not supported", ge=0)
    constant_pos_embedding: int | None = arg(None, help="not supported")
    position_embedding_offset: int = arg(0, help="not supported")
    attention_vertical_column_spacing: int | None = arg(None, help="not supported")
    attention_vertical_column_width: int | None = arg(None, help="not supported")
    attention_chunk_size: int | None = arg(None, help="not supported")
    attention_qk_norm_layer: str | None = arg(None, help="not supported")
    attention_qk_norm_eps: Real = arg(1e-5, help="not supported")
    extra_ffn_params: dict[str, Any] = arg({}, help="not supported")
    fixed_sparse_attention: dict[str, Any] | None = arg(None, help="not supported")
    memory_tokens: dict[str, Any] | None = arg(None, help="not supported")
    use_experimental_flex_api: bool = arg(False, help="not supported")
    use_sink_token: bool = arg(False, help="not supported")
    ffn_initializer: Initializer = arg(None, help="not supported")
    ffn_output_layer_initializer: Initializer = arg(None, help="not supported")
    cross_attention_layers: list[int] = arg([], help="not supported")
    rel_distance_mode: str = arg("default", help="not supported")
    rel_distance_extra_args: dict[str, Any] | None = arg(None, help="not supported")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        **_SharedArgs.ignored_arguments,
        "boundary_casting": CSX_ONLY,
        "attention_sink_tokens": (
            "Model Zoo 2.10's GPT-2 path passes only the window to its mask; sinks come from "
            "the data's add_sink_tokens transform"
        ),
    }
    path: ClassVar[str] = "gpt2"

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """The rules between keys, as Model Zoo's GPT-2 path has them."""
        yield from gpt2_path_problems(arguments)


@attrs.frozen
class GptjPathArgs(_SharedArgs):
    """A Model Zoo decoder on the GPT-J path: parallel attention and FFN."""

    position_embedding_type: Literal["learned", "fixed", "rotary", "alibi", "relative"] | None = (
        arg("rotary", help="how positions enter (alibi is not on this path)")
    )
    use_ffn_bias: bool = arg(False, help="FFN biases")
    dropout_rate: Real = arg(
        0.1, help="residual and FFN dropout", aliases=("residual_dropout_rate",)
    )
    embedding_dropout_rate: Real | None = arg(
        0.1, help="after the embeddings; null: dropout_rate", aliases=("embd_pdrop",)
    )
    scale_qk_dot_by_d: bool | None = arg(False, help="divide q.k by d, not sqrt(d)")
    use_untied_layer_norm: bool = arg(False, help="the FFN reads its own norm3")

    path: ClassVar[str] = "gptj"

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """The rules between keys, as Model Zoo's GPT-J path has them."""
        yield from gptj_path_problems(arguments)


GPT2_FAMILIES = (
    "gpt3", "llama", "jais", "mixtral", "starcoder", "gemma2", "btlm", "mistral", "bloom",
    "santacoder", "gpt2",
)  # fmt: skip
"""The names on the GPT-2 path, Model Zoo's registry order."""
GPTJ_FAMILIES = ("gptj", "falcon", "gpt-neox")
"""The names on the GPT-J path."""


def schema_for(family: str) -> type:
    """The schema a family name validates against."""
    return GptjPathArgs if family in GPTJ_FAMILIES else Gpt2PathArgs
