"""LoRA r=8 beside a full fine-tune of the same decoder, in one run: what each holds and costs.

Both fine-tune a published-style checkpoint: a Hugging Face folder of the decoder's weights in
bfloat16 (random, written once into a temporary folder). Each variant runs
``plugtrain.Trainer.fit(ckpt_path=FOLDER)`` in its own fresh process (so peak RSS is its own),
the two interleaved ``--rounds`` times: a 4-layer Llama (RMSNorm, SwiGLU, no biases; hidden
1024, vocab 32000, about 98 M parameters), built for the folder to fill
(``plugtrain.conversion.build_for_loading``: on ``meta``, never initialised, as ``plugtrain
fit`` builds it for a ``ckpt_path``), AdamW, batch 2 x 128 tokens, ``--steps`` steps, no
checkpoint (the training's memory only); LoRA adapts the attention projections
(``target_modules: [MultiQueryAttention, Linear]``, r 8, alpha 16). Printed: trainable
parameters, optimizer state bytes, peak RSS (``ru_maxrss``), the most resident memory at the
end of a step (``/proc/self/statm``) and the median step time after the first two, with LoRA's
ratio to the full fine-tune, and the load average. Goals: optimizer state under 2 %, peak RSS
at most 0.6x, step at most 0.8x.

``lora bf16`` is the LoRA fit under ``precision: {fp16_type: bfloat16}``, its frozen Linear
weights held in bfloat16 as the folder holds them; ``lora bf16 (f32 base)`` the same with
``PLUGTRAIN_BF16_BASE=0`` (the base in float32, cast at every matmul): the two compute the same,
their ratio is what holding the base in bfloat16 saves.

    python bench/lora_finetune.py [--steps 8] [--rounds 2] [--variants full,lora,...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KEYS = {
    "vocab_size": 32000, "hidden_size": 1024, "filter_size": 2816, "num_hidden_layers": 4,
    "num_heads": 16, "max_position_embeddings": 128, "attention_module": "multiquery_attention",
    "extra_attention_params": {"num_kv_groups": 2}, "share_embedding_weights": False,
    "position_embedding_type": "rotary", "rotary_dim": 64, "dropout_rate": 0.0,
    "embedding_dropout_rate": 0.0, "attention_dropout_rate": 0.0, "norm_type": "rmsnorm",
    "nonlinearity": "swiglu", "use_projection_bias_in_attention": False, "use_ffn_bias": False,
    "use_ffn_bias_in_attention": False, "use_bias_in_output": False,
}  # fmt: skip
LORA = {"r": 8, "alpha": 16, "target_modules": ["MultiQueryAttention", "Linear"]}
VARIANTS = ("full", "lora", "lora bf16", "lora bf16 (f32 base)")


class _Timer:
    """Times each optimizer step and reads the optimizer's state size after the first."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.state_bytes = 0
        self.resident = 0
        """The most resident bytes at the end of a step (after the model was built)."""
        self._start = 0.0

    def on_train_step_start(self, trainer: Any, step: int) -> None:
        self._start = time.perf_counter()

    def on_after_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        self.times.append(time.perf_counter() - self._start)
        pages = int(open("/proc/self/statm").read().split()[1])  # noqa: SIM115 - one read
        self.resident = max(self.resident, pages * resource.getpagesize())
        if not self.state_bytes:
            self.state_bytes = sum(
                v.numel() * v.element_size()
                for state in optimizer.state.values()
                for v in state.values()
                if hasattr(v, "numel") and v.dim() > 0
            )


def write_folder(folder: str) -> None:
    """The decoder's random weights as a bfloat16 Hugging Face folder."""
    import torch

    from plugtrain.conversion import export_hf
    from plugtrain_models.families import build_decoder

    torch.manual_seed(0)
    model = build_decoder("llama", KEYS)
    state = {n: t.to(torch.bfloat16) for n, t in model.state_dict().items()}
    export_hf(state, "llama", model.model_keys or KEYS, folder)


def run_variant(variant: str, steps: int, folder: str) -> dict[str, Any]:
    """Fit one variant in this process, from ``folder``; its measurements."""

    import torch

    import plugtrain
    from plugtrain.conversion import build_for_loading
    from plugtrain_models.families import build_decoder

    torch.set_num_threads(2)
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, KEYS["vocab_size"], (2 * steps, 129), generator=generator)
    rows = [{"input_ids": t[:-1], "labels": t[1:]} for t in tokens]
    loader = torch.utils.data.DataLoader(rows, batch_size=2)
    timer = _Timer()
    callbacks: list[Any] = [timer]
    if variant.startswith("lora"):
        callbacks.append({"Lora": {"lora_params": LORA}})
    bf16 = {"fp16_type": "bfloat16"} if "bf16" in variant else None
    with tempfile.TemporaryDirectory() as model_dir:
        trainer = plugtrain.Trainer(
            device="CPU",
            model_dir=model_dir,
            model=lambda: build_for_loading(lambda: build_decoder("llama", KEYS)),
            optimizer={"AdamW": {"lr": 1e-4}},
            loop={"max_steps": steps},
            checkpoint={"steps": None},  # no checkpoint: training memory only
            callbacks=callbacks,
            precision=bf16,
            seed=0,
        )
        trainer.fit(loader, ckpt_path=folder)
        model = trainer.unwrapped_model
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        held = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "model_bytes": held,
        "trainable": trainable,
        "total": total,
        "optimizer_bytes": timer.state_bytes,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "training_rss": timer.resident,
        "step_s": statistics.median(timer.times[2:]),
    }


def _spawn(variant: str, steps: int, folder: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--variant", variant, "--steps", str(steps)]
    command += ["--folder", folder]
    env = {**os.environ, "PLUGTRAIN_BF16_BASE": "0" if "f32 base" in variant else "1"}
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Run both variants interleaved and print the table (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", choices=VARIANTS)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_folder(args.folder)
        return
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.steps, args.folder)))
        return
    chosen = [v.strip() for v in args.variants.split(",")]
    if not set(chosen) <= set(VARIANTS) or "full" not in chosen:
        raise SystemExit(f"--variants: some of {', '.join(VARIANTS)}, full among them")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in chosen}
    with tempfile.TemporaryDirectory(prefix="lora_finetune-") as temporary:
        folder = str(Path(temporary) / "hf")
        # in a process of its own: a child's peak RSS starts at its parent's (fork copies it)
        write = [sys.executable, __file__, "--write", "--folder", folder]
        subprocess.run(write, check=True, capture_output=True)
        for _ in range(args.rounds):
            for variant in chosen:
                results[variant].append(_spawn(variant, args.steps, folder))
    best = {
        v: {
            **runs[0],
            "peak_rss": min(r["peak_rss"] for r in runs),
            "training_rss": min(r["training_rss"] for r in runs),
            "step_s": min(r["step_s"] for r in runs),
        }
        for v, runs in results.items()
    }
    full = best["full"]
    print(
        f"decoder: {full['total'] / 1e6:.1f} M parameters; {args.steps} steps, {args.rounds} rounds"
    )
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(f"{'':24}" + "".join(f"{v:>22}" for v in chosen) + "   (each / full)")
    rows = [
        ("trainable parameters", "trainable", 1, "{:,.0f}"),
        ("weights held MiB", "model_bytes", 2**20, "{:.0f}"),
        ("optimizer state MiB", "optimizer_bytes", 2**20, "{:.2f}"),
        ("peak RSS MiB", "peak_rss", 2**20, "{:.0f}"),
        ("RSS in training MiB", "training_rss", 2**20, "{:.0f}"),
        ("step ms (median)", "step_s", 1e-3, "{:.1f}"),
    ]
    for label, key, unit, form in rows:
        cells = []
        for variant in chosen:
            value = best[variant][key] / unit
            cells.append(f"{form.format(value)} ({value / (full[key] / unit):.3f})")
        print(f"{label:24}" + "".join(f"{c:>22}" for c in cells))
    pair = ("lora bf16", "lora bf16 (f32 base)")
    if all(v in best for v in pair):
        held, wide = (best[v] for v in pair)
        shown = ", ".join(
            f"{k} {held[k] / wide[k]:.3f}" for k in ("peak_rss", "training_rss", "step_s")
        )
        print(f"bf16 base / f32 base: {shown}")


if __name__ == "__main__":
    main()
