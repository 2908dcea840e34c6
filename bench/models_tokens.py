"""Tokens per second of plugtrain-models' decoder vs the Hugging Face class of the same size.

For each family with a ``transformers`` class, both models are built at the same size (random
weights, float32, training mode, no dropout, each library's default attention: SDPA) and timed
on the same batches, forward + backward, interleaved: one step of ours, one of theirs, repeated.
Prints the median tokens/s of each and the ratio (ours / HF; above 1 means ours is faster).

Run: ``python bench/models_tokens.py [--batch 4] [--seq 256] [--hidden 256] [--layers 4]
[--repeats 7] [--threads 2] [--families gpt3 llama ...]``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from plugtrain_models.families import build_decoder

FAMILIES = ("gpt3", "llama", "mistral", "mixtral", "gemma2", "gptj", "falcon", "bloom", "starcoder")


def _pairs(size: argparse.Namespace) -> dict[str, tuple[dict[str, Any], Callable[[], Any]]]:
    """family -> (our keys, a function building the HF model of the same size)."""
    import transformers as hf

    v, h, layers, heads, f, p = (
        1024,
        size.hidden,
        size.layers,
        size.heads,
        4 * size.hidden,
        size.seq,
    )
    shared = {"vocab_size": v, "hidden_size": h, "num_hidden_layers": layers, "num_heads": heads,
              "max_position_embeddings": p, "dropout_rate": 0.0, "attention_dropout_rate": 0.0,
              "embedding_dropout_rate": 0.0, "filter_size": f}  # fmt: skip
    llama = {**shared, "position_embedding_type": "rotary", "rotary_dim": h // heads,
             "norm_type": "rmsnorm", "nonlinearity": "swiglu", "use_ffn_bias": False,
             "use_projection_bias_in_attention": False, "use_ffn_bias_in_attention": False,
             "attention_module": "multiquery_attention",
             "extra_attention_params": {"num_kv_groups": heads // 2},
             "share_embedding_weights": False}  # fmt: skip
    hf_llama = {
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": f,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads // 2,
        "max_position_embeddings": p,
        "tie_word_embeddings": False,
    }
    gpt2 = {"vocab_size": v, "n_embd": h, "n_layer": layers, "n_head": heads, "n_positions": p,
            "n_inner": f, "activation_function": "gelu", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0}  # fmt: skip
    return {
        "gpt3": (shared, lambda: hf.GPT2LMHeadModel(hf.GPT2Config(**gpt2))),
        "starcoder": (
            {
                **shared,
                "attention_module": "multiquery_attention",
                "extra_attention_params": {"num_kv_groups": 1},
            },
            lambda: hf.GPTBigCodeForCausalLM(hf.GPTBigCodeConfig(**gpt2, multi_query=True)),
        ),
        "llama": (llama, lambda: hf.LlamaForCausalLM(hf.LlamaConfig(**hf_llama))),
        "mistral": (
            {**llama, "attention_sliding_window_length": p // 2},
            lambda: hf.MistralForCausalLM(hf.MistralConfig(**hf_llama, sliding_window=p // 2)),
        ),
        "mixtral": (
            {**llama, "filter_size": f // 4, "moe": {"num_experts": 4, "top_k": 2}},
            lambda: hf.MixtralForCausalLM(
                hf.MixtralConfig(
                    **{**hf_llama, "intermediate_size": f // 4},
                    num_local_experts=4,
                    num_experts_per_tok=2,
                    router_aux_loss_coef=0.0,
                )
            ),
        ),
        "gemma2": (
            {
                **llama,
                "nonlinearity": "geglu",
                "norm_first_sandwich": True,
                "share_embedding_weights": True,
                "attention_sliding_window_length": p // 2,
                "sliding_window_every_other_decoder_layer": True,
                "attention_logit_softcapping": 50.0,
                "final_logit_softcapping": 30.0,
            },
            lambda: hf.Gemma2ForCausalLM(
                hf.Gemma2Config(
                    **{**hf_llama, "tie_word_embeddings": True},
                    head_dim=h // heads,
                    sliding_window=p // 2,
                    hidden_activation="gelu",
                )
            ),
        ),
        "gptj": (
            {
                **shared,
                "rotary_dim": (h // heads) // 4,
                "share_embedding_weights": False,
                "use_bias_in_output": True,
                "use_ffn_bias": True,
                "use_projection_bias_in_attention": False,
                "use_ffn_bias_in_attention": False,
            },
            lambda: hf.GPTJForCausalLM(hf.GPTJConfig(**gpt2, rotary_dim=(h // heads) // 4)),
        ),
        "falcon": (
            {
                **shared,
                "rotary_dim": h // heads,
                "attention_module": "multiquery_attention",
                "extra_attention_params": {"num_kv_groups": 1},
                "use_projection_bias_in_attention": False,
                "use_ffn_bias_in_attention": False,
            },
            lambda: hf.FalconForCausalLM(
                hf.FalconConfig(
                    vocab_size=v,
                    hidden_size=h,
                    num_hidden_layers=layers,
                    num_attention_heads=heads,
                    multi_query=True,
                    parallel_attn=True,
                    bias=False,
                    alibi=False,
                    ffn_hidden_size=f,
                    activation="gelu",
                    max_position_embeddings=p,
                )
            ),
        ),
        "bloom": (
            {**shared, "position_embedding_type": "alibi", "embedding_layer_norm": True},
            lambda: hf.BloomForCausalLM(
                hf.BloomConfig(vocab_size=v, hidden_size=h, n_layer=layers, n_head=heads)
            ),
        ),
    }


def _step_ours(model: Any, ids: torch.Tensor) -> None:
    batch = {
        "input_ids": ids[:, :-1],
        "labels": ids[:, 1:],
        "attention_mask": torch.ones_like(ids[:, 1:]),
    }
    model(batch)["loss"].backward()
    model.zero_grad(set_to_none=True)


def _step_hf(model: Any, ids: torch.Tensor) -> None:
    model(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss.backward()
    model.zero_grad(set_to_none=True)


def _timed(step: Callable[[Any, torch.Tensor], None], model: Any, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    step(model, ids)
    return time.perf_counter() - start


def main() -> None:
    """Parse the arguments, run every family and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    size = parser.parse_args()
    torch.set_num_threads(size.threads)
    warnings.simplefilter("ignore")
    import transformers

    print(
        f"{platform.machine()} {platform.python_version()} torch {torch.__version__} "
        f"transformers {transformers.__version__}; {size.threads} threads; batch {size.batch} x "
        f"{size.seq} tokens, hidden {size.hidden}, {size.layers} layers, {size.heads} heads, "
        f"median of {size.repeats} interleaved forward+backward steps"
    )
    print("| family | ours tokens/s | HF tokens/s | ours / HF |\n|---|---|---|---|")
    tokens = size.batch * size.seq
    pairs = _pairs(size)
    for family in size.families:
        keys, make_hf = pairs[family]
        torch.manual_seed(0)
        ours = build_decoder(family, keys).train()
        theirs = make_hf().train()
        ids = torch.randint(
            0, 1024, (size.batch, size.seq + 1), generator=torch.Generator().manual_seed(0)
        )
        _step_ours(ours, ids)  # warm-up, both
        _step_hf(theirs, ids)
        mine, hf = [], []
        for _ in range(size.repeats):
            mine.append(_timed(_step_ours, ours, ids))
            hf.append(_timed(_step_hf, theirs, ids))
        ours_rate, hf_rate = tokens / statistics.median(mine), tokens / statistics.median(hf)
        print(
            f"| {family} | {ours_rate:,.0f} | {hf_rate:,.0f} | {ours_rate / hf_rate:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
