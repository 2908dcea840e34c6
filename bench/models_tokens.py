"""Training tokens per second of plugtrain-models' decoders vs transformers', equal weights.

For each family with a ``transformers`` class, the Hugging Face model is built at the given size
(random weights, no dropout), saved, and converted with plugtrain's own converter into the
plugtrain model, so both hold the same weights and compute the same loss: the first step
checks that their float32 losses agree within ``--loss-rtol`` (2.5e-7 relative by default:
two float32 ulps at ln(8192)).
Then one step (forward, loss, backward, gradients cleared) of each is timed in turn, in
training mode, in float32 and under ``torch.autocast("cpu", bfloat16)``; the order alternates
every round, and the medians are compared (ours / HF; above 1 means ours is faster). The
fastest step of each is compared too (``best / best``): on a shared machine other work only
adds time, so the fastest steps are the closest to a quiet machine's; ``CPU time`` is the ratio
of the median process CPU seconds of a step (HF's over ours: the work each does, less moved by
other processes than wall time, though waiting threads spin); ``spread`` is the larger side's
interquartile range over its median, the noise of the run. The load average (``os.getloadavg``)
is printed before and after the table.

Each library's default attention: SDPA, except Gemma 2, whose attention soft-capping only
transformers' eager path computes. The plugtrain step is the one the Trainer runs between log
lines (``metrics_wanted`` off: no accuracy; in float32 its head and loss run fused, without the
whole logits, logged or not); ``--with-metrics`` times a logged step instead.
Both sides score the same labels: transformers gets ``shift_labels`` (the labels already
shifted, as plugtrain's data gives them), so neither shifts or copies the logits.

Run: ``python bench/models_tokens.py [--batch 4] [--seq 256] [--hidden 256] [--layers 4]
[--heads 8] [--vocab 8192] [--repeats 15] [--threads 2] [--dtypes float32 bfloat16]
[--families gpt3 llama ...]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

FAMILIES = (
    "gpt3", "llama", "mistral", "mixtral", "gemma2", "gptj", "falcon", "bloom", "starcoder",
    "gpt-neox",
)  # fmt: skip
"""Every family with a transformers class (santacoder is starcoder's class and path again;
jais and btlm exist only as remote code)."""


def hf_configs(size: argparse.Namespace) -> dict[str, tuple[str, Any]]:
    """family -> (transformers class name, its config at ``size``, without dropout)."""
    import transformers as hf

    v, h, n, heads, p, f = size.vocab, size.hidden, size.layers, size.heads, size.seq, size.ffn
    gpt2 = {"vocab_size": v, "n_embd": h, "n_layer": n, "n_head": heads, "n_positions": p,
            "n_inner": f, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # fmt: skip
    llama = {"vocab_size": v, "hidden_size": h, "intermediate_size": f, "num_hidden_layers": n,
             "num_attention_heads": heads, "num_key_value_heads": heads // 2,
             "max_position_embeddings": p, "tie_word_embeddings": False}  # fmt: skip
    return {
        "gpt3": ("GPT2LMHeadModel", hf.GPT2Config(**gpt2)),
        "starcoder": ("GPTBigCodeForCausalLM", hf.GPTBigCodeConfig(**gpt2, multi_query=True)),
        "llama": ("LlamaForCausalLM", hf.LlamaConfig(**llama)),
        "mistral": ("MistralForCausalLM", hf.MistralConfig(**llama, sliding_window=p // 2)),
        "mixtral": (  # 4 experts, 2 per token, each half as wide: a dense FFN's arithmetic
            "MixtralForCausalLM",
            hf.MixtralConfig(
                **{**llama, "intermediate_size": f // 2},
                num_local_experts=4,
                num_experts_per_tok=2,
                router_aux_loss_coef=0.0,
            ),
        ),
        "gemma2": (
            "Gemma2ForCausalLM",
            hf.Gemma2Config(
                **{**llama, "tie_word_embeddings": True},
                head_dim=h // heads,
                sliding_window=p // 2,
                hidden_activation="gelu_pytorch_tanh",
            ),
        ),
        "gptj": ("GPTJForCausalLM", hf.GPTJConfig(**gpt2, rotary_dim=(h // heads) // 4)),
        "gpt-neox": (
            "GPTNeoXForCausalLM",
            hf.GPTNeoXConfig(
                vocab_size=v,
                hidden_size=h,
                num_hidden_layers=n,
                num_attention_heads=heads,
                intermediate_size=f,
                max_position_embeddings=p,
                rotary_pct=0.25,
                hidden_dropout=0.0,
                attention_dropout=0.0,
                tie_word_embeddings=False,
            ),
        ),
        "falcon": (
            "FalconForCausalLM",
            hf.FalconConfig(
                vocab_size=v,
                hidden_size=h,
                num_hidden_layers=n,
                num_attention_heads=heads,
                multi_query=True,
                parallel_attn=True,
                bias=False,
                alibi=False,
                ffn_hidden_size=f,
                max_position_embeddings=p,
                hidden_dropout=0.0,
                attention_dropout=0.0,
            ),
        ),
        "bloom": (
            "BloomForCausalLM",
            hf.BloomConfig(
                vocab_size=v,
                hidden_size=h,
                n_layer=n,
                n_head=heads,
                hidden_dropout=0.0,
                attention_dropout=0.0,
            ),
        ),
    }


def build_pair(family: str, size: argparse.Namespace, folder: Path) -> tuple[Any, Any]:
    """The transformers model and the plugtrain model converted from its saved weights."""
    import transformers

    from plugtrain.conversion import hf_to_plugtrain
    from plugtrain.discovery.loading import get_registry

    class_name, config = hf_configs(size)[family]
    torch.manual_seed(0)
    theirs = getattr(transformers, class_name)(config)
    theirs.save_pretrained(folder / family)
    converted = hf_to_plugtrain(folder / family, model=family)
    converted.model_keys.pop("load_balancing_loss_coef", None)
    ours = get_registry().resolve("model", converted.model_name)(**converted.model_keys)
    ours.load_state_dict(converted.state)
    return ours.train(), theirs.train()


def ours_step(model: Any, batch: dict[str, torch.Tensor], precision: Callable[[], Any]) -> float:
    """Forward, loss and backward of the plugtrain model on ``batch``; its loss."""
    with precision():
        loss = model(batch)["loss"]
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss)


def hf_step(model: Any, batch: dict[str, torch.Tensor], precision: Callable[[], Any]) -> float:
    """Forward, loss and backward of the transformers model on ``batch``; its loss."""
    with precision():
        labels = batch["labels"]
        loss = model(input_ids=batch["input_ids"], labels=labels, shift_labels=labels).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss)


def precisions() -> dict[str, Callable[[], Any]]:
    """dtype name -> the context each step runs its forward and loss in."""
    return {
        "float32": contextlib.nullcontext,
        "bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    }


def timed(step: Callable[..., float], *args: Any) -> tuple[float, float]:
    """Wall and process CPU seconds one call of ``step(*args)`` takes."""
    start, cpu = time.perf_counter(), time.process_time()
    step(*args)
    return time.perf_counter() - start, time.process_time() - cpu


def race(
    ours: Any, theirs: Any, batch: dict[str, torch.Tensor], precision: Any, repeats: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall, CPU) seconds of each side's steps, alternating which goes first every round."""
    for _ in range(2):  # warm-up: allocator, autocast caches, first-call paths
        ours_step(ours, batch, precision)
        hf_step(theirs, batch, precision)
    mine, hf = [], []
    for round_ in range(repeats):
        if round_ % 2:
            hf.append(timed(hf_step, theirs, batch, precision))
            mine.append(timed(ours_step, ours, batch, precision))
        else:
            mine.append(timed(ours_step, ours, batch, precision))
            hf.append(timed(hf_step, theirs, batch, precision))
    return mine, hf


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _spread(times: list[float]) -> float:
    """The interquartile range over the median: how noisy one side's timings were."""
    quartiles = statistics.quantiles(times, n=4)
    return (quartiles[2] - quartiles[0]) / statistics.median(times)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers' and the converters' warnings off (their config notes are not results)."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def parse() -> argparse.Namespace:
    """The command line (the issue's shapes by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--ffn", type=int, default=0, help="FFN width (default 4 x hidden)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    # 2.5e-7: two float32 ulps at a loss near ln(8192) = 9.01 (one ulp there is 1.05e-7 of it)
    parser.add_argument("--loss-rtol", type=float, default=2.5e-7)
    parser.add_argument("--with-metrics", action="store_true", help="time a logged step")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES))
    size = parser.parse_args()
    size.ffn = size.ffn or 4 * size.hidden
    return size


def main() -> None:
    """Build every family's pair, check their losses agree, race them and print the table."""
    size = parse()
    torch.set_num_threads(size.threads)
    import transformers

    print(
        f"{platform.machine()} {platform.python_version()} torch {torch.__version__} "
        f"transformers {transformers.__version__}; {size.threads} threads; batch {size.batch} x "
        f"{size.seq} tokens, hidden {size.hidden}, {size.layers} layers, {size.heads} heads, "
        f"vocab {size.vocab}; median of {size.repeats} interleaved steps (forward, loss, "
        f"backward){'; logged steps (accuracy computed)' if size.with_metrics else ''}"
    )
    print(
        f"{load()}\n| family | dtype | ours tokens/s | HF tokens/s | ours / HF | best / best "
        "| CPU time | spread | loss diff |\n|---|---|---|---|---|---|---|---|---|"
    )
    tokens = size.batch * size.seq
    ids = torch.randint(
        0, size.vocab, (size.batch, size.seq + 1), generator=torch.Generator().manual_seed(0)
    )
    batch = {  # as a loader gives them: contiguous, labels already shifted, every token scored
        "input_ids": ids[:, :-1].contiguous(),
        "labels": ids[:, 1:].contiguous(),
        "attention_mask": torch.ones(size.batch, size.seq, dtype=torch.long),
    }
    mismatched = []
    with tempfile.TemporaryDirectory() as folder, quiet():
        for family in size.families:
            ours, theirs = build_pair(family, size, Path(folder))
            ours.metrics_wanted = size.with_metrics
            for dtype in size.dtypes:
                precision = precisions()[dtype]
                mine, hf = ours_step(ours, batch, precision), hf_step(theirs, batch, precision)
                difference = abs(mine - hf) / abs(hf)
                if dtype == "float32" and difference > size.loss_rtol:
                    mismatched.append(f"{family}: {mine!r} vs {hf!r}")
                mine_t, hf_t = race(ours, theirs, batch, precision, size.repeats)
                mine_s, hf_s = [t[0] for t in mine_t], [t[0] for t in hf_t]
                ours_s, theirs_s = statistics.median(mine_s), statistics.median(hf_s)
                cpu = statistics.median(t[1] for t in hf_t) / statistics.median(
                    t[1] for t in mine_t
                )
                spread = max(_spread(mine_s), _spread(hf_s))
                print(
                    f"| {family} | {dtype} | {tokens / ours_s:,.0f} | {tokens / theirs_s:,.0f} | "
                    f"{theirs_s / ours_s:.2f} | {min(hf_s) / min(mine_s):.2f} | {cpu:.2f} | "
                    f"{spread:.0%} | {difference:.1e} |",
                    flush=True,
                )
    print(load())
    if mismatched:
        raise SystemExit("float32 losses differ by more than --loss-rtol: " + "; ".join(mismatched))


if __name__ == "__main__":
    main()
