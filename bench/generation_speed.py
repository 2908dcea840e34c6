"""Generation tokens/s: plugtrain's cached decoder vs transformers' ``generate``, side by side.

    python bench/generation_speed.py            # prints a table and the ratios

One Llama-shaped model (hidden 512, 8 layers, 8 heads, 4 k/v groups, vocab 8192, 32 M
parameters, float32, one thread, batch 1) built in transformers, saved as a Hugging Face folder
and read into plugtrain's decoder with the converters, so both sides hold the same weights.
Both decode greedily, exactly ``NEW_TOKENS`` new tokens (no EOS), after a prompt of 16 and of
512 tokens. Rounds alternate between the two sides; the medians are compared. Tokens/s counts
the new tokens over the whole call (prompt processing included).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from collections.abc import Callable

import torch

PROMPT_LENGTHS = (16, 512)
NEW_TOKENS = 64
ROUNDS = 5
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


def _timed(run: Callable[[], list[int]]) -> tuple[float, list[int]]:
    start = time.perf_counter()
    ids = run()
    return time.perf_counter() - start, ids


def main() -> None:
    """Time both sides for each prompt length and print tokens/s and the ratio."""
    from plugtrain_models.generation import generate

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    ours, theirs = _models()
    print(f"{sum(p.numel() for p in ours.parameters()) / 1e6:.1f} M parameters, "
          f"{NEW_TOKENS} new tokens, median of {ROUNDS}")  # fmt: skip
    print("| prompt | plugtrain tok/s | transformers tok/s | plugtrain / transformers |")
    print("|---|---|---|---|")
    for length in PROMPT_LENGTHS:
        prompt = torch.randint(0, CONFIG["vocab_size"], (1, length),
                               generator=torch.Generator().manual_seed(length))  # fmt: skip

        def plugtrain_side(prompt: torch.Tensor = prompt) -> list[int]:
            return generate(ours, [prompt[0].tolist()], NEW_TOKENS)[0]

        def transformers_side(prompt: torch.Tensor = prompt) -> list[int]:
            with torch.no_grad():
                out = theirs.generate(
                    prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                    max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, eos_token_id=None,
                    pad_token_id=0,
                )  # fmt: skip
            return [int(i) for i in out[0, prompt.shape[1] :]]

        _timed(plugtrain_side), _timed(transformers_side)  # warm-up
        times: dict[str, list[float]] = {"plugtrain": [], "transformers": []}
        same = True
        for _ in range(ROUNDS):
            mine, ours_ids = _timed(plugtrain_side)
            theirs_time, their_ids = _timed(transformers_side)
            times["plugtrain"].append(mine)
            times["transformers"].append(theirs_time)
            same = same and ours_ids == their_ids
        rate = {side: NEW_TOKENS / statistics.median(t) for side, t in times.items()}
        ratio = rate["plugtrain"] / rate["transformers"]
        print(f"| {length} | {rate['plugtrain']:.1f} | {rate['transformers']:.1f} | "
              f"{ratio:.2f}{'' if same else ' (ids differ!)'} |")  # fmt: skip


if __name__ == "__main__":
    main()
