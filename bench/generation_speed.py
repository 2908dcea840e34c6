"""Generation tokens/s: plugtrain's cached decoder vs transformers' ``generate``, side by side.

    python bench/generation_speed.py                  # two threads, 5 rounds
    python bench/generation_speed.py --threads 1 --rounds 9
    python bench/generation_speed.py --unfused        # also plugtrain without fused products

One Llama-shaped model (hidden 512, 8 layers, 8 heads, 4 k/v groups, vocab 8192, 32 M
parameters, float32, batch 1) built in transformers, saved as a Hugging Face folder and read
into plugtrain's decoder with the converters, so both sides hold the same weights. Both decode
greedily, exactly ``NEW_TOKENS`` new tokens (no EOS), after a prompt of 16 and of 512 tokens.
Rounds alternate between the sides; the medians are compared (and, by CPU time, the fastest
rounds: the least disturbed by other jobs). Tokens/s counts the new tokens over the whole call
(prompt processing included), by the wall clock and by the process's CPU time (with one thread
the CPU time is what a quiet machine's wall clock would read; other jobs sharing the cores
inflate the wall clock, and with two threads they also make each thread wait for the other).
``--unfused`` adds plugtrain's decode step without its fused products (``LayerPlan.fuse`` off)
as a third side. The load average is printed with the figures.

On cores shared with other jobs, run two threads with ``OMP_WAIT_POLICY=PASSIVE``: by default
OpenMP's idle worker spins between parallel regions, and while other jobs hold the cores each
region waits for one (every side's calls then run several times slower, by amounts that swing
from round to round). The policy in effect is printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch

PROMPT_LENGTHS = (16, 512)
NEW_TOKENS = 64
CONFIG = {
    "vocab_size": 8192,
    "hidden_size": 512,
    "intermediate_size": 1408,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
}


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    import transformers

    from plugtrain.conversion import hf_to_plugtrain
    from plugtrain_models.families import build_decoder

    torch.manual_seed(0)
    theirs = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        converted = hf_to_plugtrain(folder)
    ours = build_decoder(converted.model_name, converted.model_keys).eval()
    ours.load_state_dict(converted.state)
    return ours, theirs


def _timed(run: Callable[[], list[int]]) -> tuple[float, float, list[int]]:
    """Wall-clock and process CPU seconds of ``run``, and its ids."""
    start, cpu = time.perf_counter(), time.process_time()
    ids = run()
    return time.perf_counter() - start, time.process_time() - cpu, ids


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _matmuls_alone(model: torch.nn.Module, rounds: int) -> float:
    """CPU seconds per token of every ``nn.Linear`` of ``model`` on one token, nothing else.

    The weights' matrix-vector products are what any decoder must compute per new token (at
    batch 1 they read every weight once): the floor of a step, whatever runs around them.
    """
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {width: torch.randn(1, width) for width in {w.shape[1] for w in weights}}
    tokens, times = 16, []
    with torch.no_grad():
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(tokens):
                for weight in weights:
                    torch.nn.functional.linear(inputs[weight.shape[1]], weight)
            times.append((time.process_time() - start) / tokens)
    return statistics.median(times)


def _rounds(
    sides: dict[str, Callable[[], list[int]]], rounds: int
) -> tuple[dict[str, float], dict[str, float], dict[str, float], bool]:
    """Each side's median wall and CPU seconds and its least CPU seconds over alternating
    rounds, and whether every round of every side wrote the same ids."""
    for run in sides.values():  # warm-up
        _timed(run)
    wall: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    ids: dict[str, list[int]] = {}
    same = True
    for _ in range(rounds):
        for side, run in sides.items():
            seconds, cpu_seconds, ids[side] = _timed(run)
            wall[side].append(seconds)
            cpu[side].append(cpu_seconds)
        first = next(iter(ids.values()))
        same = same and all(got == first for got in ids.values())
    return (
        {side: statistics.median(t) for side, t in wall.items()},
        {side: statistics.median(t) for side, t in cpu.items()},
        {side: min(t) for side, t in cpu.items()},
        same,
    )


def main() -> None:
    """Time both sides for each prompt length and print tokens/s and the ratios."""
    from plugtrain_models.decode_step import LayerPlan
    from plugtrain_models.generation import generate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (every side)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side")
    parser.add_argument(
        "--unfused", action="store_true", help="also time plugtrain without fused products"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    ours, theirs = _models()
    print(f"{sum(p.numel() for p in ours.parameters()) / 1e6:.1f} M parameters, "
          f"{NEW_TOKENS} new tokens, {args.threads} thread(s), median of {args.rounds}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}; "
          f"{_load()}")  # fmt: skip
    columns = "| prompt | plugtrain tok/s | transformers tok/s | plugtrain / transformers "
    columns += "| CPU-time ratio | fastest rounds' CPU-time ratio |"
    if args.unfused:
        columns += " unfused / transformers | unfused CPU-time ratio |"
    columns += " load average after |"
    print(columns)
    print("|---" * (columns.count("|") - 1) + "|")
    their_cpu: dict[int, float] = {}
    for length in PROMPT_LENGTHS:
        prompt = torch.randint(0, CONFIG["vocab_size"], (1, length),
                               generator=torch.Generator().manual_seed(length))  # fmt: skip

        def plugtrain_side(prompt: torch.Tensor = prompt, fuse: bool = True) -> list[int]:
            LayerPlan.fuse = fuse
            return generate(ours, [prompt[0].tolist()], NEW_TOKENS)[0]

        def unfused_side(prompt: torch.Tensor = prompt) -> list[int]:
            return plugtrain_side(prompt, fuse=False)

        def transformers_side(prompt: torch.Tensor = prompt) -> list[int]:
            with torch.no_grad():
                out = theirs.generate(
                    prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                    max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None,
                    pad_token_id=0,
                )  # fmt: skip
            return [int(i) for i in out[0, prompt.shape[1] :]]

        sides: dict[str, Callable[[], list[int]]] = {
            "plugtrain": plugtrain_side, "transformers": transformers_side,
        }  # fmt: skip
        if args.unfused:
            sides["unfused"] = unfused_side
        wall, cpu_median, cpu_least, same = _rounds(sides, args.rounds)
        LayerPlan.fuse = True
        rate = {side: NEW_TOKENS / seconds for side, seconds in wall.items()}
        their_cpu[length] = cpu_median["transformers"] / NEW_TOKENS
        row = f"| {length} | {rate['plugtrain']:.1f} | {rate['transformers']:.1f} | "
        row += f"{rate['plugtrain'] / rate['transformers']:.2f}"
        row += f"{'' if same else ' (ids differ!)'} | "
        row += f"{cpu_median['transformers'] / cpu_median['plugtrain']:.2f} | "
        row += f"{cpu_least['transformers'] / cpu_least['plugtrain']:.2f} |"
        if args.unfused:
            row += f" {rate['unfused'] / rate['transformers']:.2f} | "
            row += f"{cpu_median['transformers'] / cpu_median['unfused']:.2f} |"
        print(f"{row} {_load().removeprefix('load average ')} |")
    floor = _matmuls_alone(ours, args.rounds)
    print(f"the weights' matmuls alone: {floor * 1e3:.1f} CPU ms per token; transformers' CPU "
          "time per new token (its prompt included) over that: "
          + ", ".join(f"{their_cpu[n] / floor:.2f} at {n}" for n in PROMPT_LENGTHS))  # fmt: skip
    print(_load())


if __name__ == "__main__":
    main()
