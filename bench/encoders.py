"""Training tokens per second of plugtrain-models' ``bert``, ``esm2`` and ``t5`` vs transformers'.

Each Hugging Face model (``BertForPreTraining``, ``EsmForMaskedLM``,
``T5ForConditionalGeneration``) is built at the given size (random weights, no dropout), saved,
and converted with plugtrain's own converter (``bert``, ``esm-2``, ``t5``), so both sides hold
the same weights. The first float32 step checks that they compute the same function: T5's
losses agree (``mlm_loss_scaling: num_masked`` is transformers' mean), BERT's and ESM-2's MLM
logits at the masked positions agree (their losses are normalised differently: Model Zoo sums
over the predictions and divides by the batch).

Then one training step (forward, loss, backward, gradients cleared) of each is timed in turn, in
float32 and under ``torch.autocast("cpu", bfloat16)``; the order alternates every round and the
medians are compared (``ours / HF``: above 1 means ours is faster), with the fastest steps
(``best / best``), the median process CPU seconds (``CPU time``, HF's over ours: on a loaded
machine a step waits for the cores, which adds wall time but not CPU time) and the noise
(``spread``: the larger side's interquartile range over its median).

Each side gets the batch it trains on: transformers' MLM labels are ``[B, S]`` with -100 off the
masked positions, Model Zoo's are gathered at ``masked_lm_positions``. Tokens are the encoder's
(and T5's decoder's) input ids. Each library's default attention (transformers' T5 computes its
relative bias eagerly).

Run: ``python bench/encoders.py [--batch 4] [--seq 256] [--hidden 256] [--layers 4] [--heads 8]
[--vocab 8192] [--repeats 15] [--threads 2] [--dtypes float32 bfloat16] [--models bert esm2 t5]``
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

MODELS = ("bert", "esm2", "t5")
CONVERTERS = {"bert": "bert", "esm2": "esm-2", "t5": "t5"}
MASKED = 0.15
"""The share of positions an MLM batch predicts."""


def hf_model(name: str, size: argparse.Namespace) -> Any:
    """The transformers model of ``name`` at ``size``, without dropout."""
    import transformers as hf

    h, n, heads, f = size.hidden, size.layers, size.heads, 4 * size.hidden
    if name == "bert":
        config = hf.BertConfig(
            vocab_size=size.vocab, hidden_size=h, num_hidden_layers=n, num_attention_heads=heads,
            intermediate_size=f, max_position_embeddings=size.seq, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        return hf.BertForPreTraining(config)
    if name == "esm2":
        config = hf.EsmConfig(
            vocab_size=33, hidden_size=h, num_hidden_layers=n, num_attention_heads=heads,
            intermediate_size=f, max_position_embeddings=size.seq + 2, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, position_embedding_type="rotary",
            token_dropout=True, mask_token_id=32, pad_token_id=1, emb_layer_norm_before=False,
        )  # fmt: skip
        return hf.EsmForMaskedLM(config)
    config = hf.T5Config(
        vocab_size=size.vocab, d_model=h, d_kv=h // heads, num_heads=heads, d_ff=f,
        num_layers=n, num_decoder_layers=n, dropout_rate=0.0, feed_forward_proj="relu",
        decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return hf.T5ForConditionalGeneration(config)


def build_pair(name: str, size: argparse.Namespace, folder: Path) -> tuple[Any, Any]:
    """The transformers model and the plugtrain model converted from its saved weights."""
    from plugtrain import get_registry
    from plugtrain.conversion import hf_to_plugtrain

    torch.manual_seed(0)
    theirs = hf_model(name, size)
    theirs.save_pretrained(folder / name)
    converted = hf_to_plugtrain(folder / name, model=CONVERTERS[name])
    keys = dict(converted.model_keys)
    if name == "t5":
        keys["mlm_loss_scaling"] = "num_masked"
    keys.update({k: 0.0 for k in ("dropout_rate", "attention_dropout_rate") if k in keys})
    ours = get_registry().resolve("model", converted.model_name)(**keys)
    ours.load_state_dict(converted.state)
    ours.metrics_wanted = False
    return ours.train(), theirs.train()


def batches(name: str, size: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Our batch, transformers' batch (the same examples) and the tokens they hold."""
    generator = torch.Generator().manual_seed(0)
    b, s = size.batch, size.seq
    if name == "t5":
        ids = torch.randint(1, size.vocab, (b, s), generator=generator)
        labels = torch.randint(1, size.vocab, (b, s // 2), generator=generator)
        decoder = torch.cat([torch.zeros(b, 1, dtype=torch.long), labels[:, :-1]], dim=1)
        ours = {
            "input_ids": ids, "attention_mask": torch.ones_like(ids),
            "decoder_input_ids": decoder, "decoder_attention_mask": torch.ones_like(labels),
            "labels": labels,
        }  # fmt: skip
        theirs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
        return ours, theirs, ids.numel() + labels.numel()
    vocab = 33 if name == "esm2" else size.vocab
    low = 4 if name == "esm2" else 1
    ids = torch.randint(
        low, min(vocab, 29 if name == "esm2" else vocab), (b, s), generator=generator
    )
    predictions = int(s * MASKED)
    positions = torch.stack([torch.randperm(s - 1, generator=generator)[:predictions] + 1
                             for _ in range(b)]).sort(-1).values  # fmt: skip
    originals = ids.gather(1, positions)
    masked_ids = ids.scatter(1, positions, 32 if name == "esm2" else 3)
    full_labels = torch.full_like(ids, -100).scatter(1, positions, originals)
    ours = {
        "input_ids": masked_ids, "attention_mask": torch.ones_like(ids),
        "masked_lm_positions": positions, "masked_lm_mask": torch.ones_like(positions),
        "labels": originals,
    }  # fmt: skip
    theirs = {
        "input_ids": masked_ids,
        "attention_mask": torch.ones_like(ids),
        "labels": full_labels,
    }
    if name == "bert":
        ours["token_type_ids"] = theirs["token_type_ids"] = torch.zeros_like(ids)
        nsp = torch.randint(0, 2, (b,), generator=generator)
        ours["next_sentence_label"], theirs["next_sentence_label"] = nsp[:, None], nsp
    return ours, theirs, ids.numel()


def ours_step(model: Any, batch: dict[str, Any], precision: Callable[[], Any]) -> float:
    """Forward, loss and backward of the plugtrain model on ``batch``; its loss."""
    with precision():
        loss = model(batch)["loss"]
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss)


def hf_step(model: Any, batch: dict[str, Any], precision: Callable[[], Any]) -> float:
    """Forward, loss and backward of the transformers model on ``batch``; its loss."""
    with precision():
        loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return float(loss)


def same_function(
    name: str, ours: Any, theirs: Any, mine: dict[str, Any], hf: dict[str, Any]
) -> float:
    """How far apart the two models' float32 outputs are (relative): losses or MLM logits."""
    with torch.no_grad():
        if name == "t5":
            a, b = ours(mine)["loss"], theirs(**hf).loss
        else:
            a = ours.logits(mine)["mlm_logits"]
            logits = theirs(**{k: v for k, v in hf.items() if "label" not in k})
            scores = logits.prediction_logits if name == "bert" else logits.logits
            index = mine["masked_lm_positions"][..., None].expand(-1, -1, scores.shape[-1])
            b = scores.gather(1, index)
    return float((a - b).abs().max() / b.abs().max())


def precisions() -> dict[str, Callable[[], Any]]:
    """dtype name -> the context each step runs its forward and loss in."""
    return {
        "float32": contextlib.nullcontext,
        "bfloat16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    }


def timed(step: Callable[..., float], *args: Any) -> tuple[float, float]:
    """Wall-clock and process CPU seconds one call of ``step(*args)`` takes."""
    start, cpu = time.perf_counter(), time.process_time()
    step(*args)
    return time.perf_counter() - start, time.process_time() - cpu


def race(
    ours: Any, theirs: Any, batches: tuple[dict[str, Any], dict[str, Any]], precision: Any,
    repeats: int,
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:  # fmt: skip
    """Wall and CPU seconds of each side's steps, alternating which goes first every round."""
    mine_batch, hf_batch = batches
    for _ in range(2):  # warm-up: allocator, autocast caches, first-call paths
        ours_step(ours, mine_batch, precision)
        hf_step(theirs, hf_batch, precision)
    mine, hf = [], []
    for round_ in range(repeats):
        if round_ % 2:
            hf.append(timed(hf_step, theirs, hf_batch, precision))
            mine.append(timed(ours_step, ours, mine_batch, precision))
        else:
            mine.append(timed(ours_step, ours, mine_batch, precision))
            hf.append(timed(hf_step, theirs, hf_batch, precision))
    return mine, hf


def _spread(times: list[float]) -> float:
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
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4, help="layers (of each T5 stack)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=8192, help="BERT's and T5's")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-4, help="float32 agreement")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    return parser.parse_args()


def main() -> None:
    """Build each pair, check they compute the same function, race them, print the table."""
    size = parse()
    torch.set_num_threads(size.threads)
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{platform.machine()} {platform.python_version()} torch {torch.__version__} "
        f"transformers {transformers.__version__}; {size.threads} threads; load {load:.1f} "
        f"on {os.cpu_count()} cores; batch {size.batch} x {size.seq} tokens, hidden "
        f"{size.hidden}, {size.layers} layers, {size.heads} heads, vocab {size.vocab}; median "
        f"of {size.repeats} interleaved steps (forward, loss, backward)"
    )
    print(
        "| model | dtype | ours tokens/s | HF tokens/s | ours / HF | best / best | CPU time "
        "| spread | float32 diff |\n|---|---|---|---|---|---|---|---|---|"
    )
    mismatched = []
    with tempfile.TemporaryDirectory() as folder, quiet():
        for name in size.models:
            ours, theirs = build_pair(name, size, Path(folder))
            mine, hf, tokens = batches(name, size)
            difference = same_function(name, ours, theirs, mine, hf)
            if difference > size.tolerance:
                mismatched.append(f"{name}: {difference:.1e}")
            for dtype in size.dtypes:
                mine_t, hf_t = race(ours, theirs, (mine, hf), precisions()[dtype], size.repeats)
                mine_s, hf_s = [t[0] for t in mine_t], [t[0] for t in hf_t]
                ours_t, theirs_t = statistics.median(mine_s), statistics.median(hf_s)
                cpu = statistics.median(t[1] for t in hf_t) / statistics.median(
                    t[1] for t in mine_t
                )
                spread = max(_spread(mine_s), _spread(hf_s))
                print(
                    f"| {name} | {dtype} | {tokens / ours_t:,.0f} | {tokens / theirs_t:,.0f} | "
                    f"{theirs_t / ours_t:.2f} | {min(hf_s) / min(mine_s):.2f} | {cpu:.2f} | "
                    f"{spread:.0%} | {difference:.1e} |",
                    flush=True,
                )
    if mismatched:
        raise SystemExit("the float32 outputs differ: " + "; ".join(mismatched))


if __name__ == "__main__":
    main()
