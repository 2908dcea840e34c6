"""The generation loop: prompts in, new token ids out, one cached decoder step per token."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from plugtrain_models.decoder import LanguageModel
from plugtrain_models.generation.sampling import Sampling
from plugtrain_models.generation.text import TextTokenizer

__all__ = ["StopCheck", "generate", "generate_text", "language_model"]

StopCheck = Callable[[int, list[int]], bool]
"""``(row, generated ids so far) -> stop now``: a stop rule the ids alone cannot say (text)."""


def language_model(model: nn.Module) -> LanguageModel:
    """The :class:`LanguageModel` inside ``model`` (a ``DecoderLM``, or the decoder itself)."""
    inner = getattr(model, "model", model)
    if not isinstance(inner, LanguageModel):
        message = f"generation needs a plugtrain-models decoder, got {type(model).__name__}"
        raise TypeError(message)
    return inner


def _ends(ids: list[int], eos_ids: frozenset[int], stops: Sequence[Sequence[int]]) -> bool:
    if ids[-1] in eos_ids:
        return True
    return any(len(stop) and ids[-len(stop) :] == list(stop) for stop in stops)


@torch.no_grad()
def generate(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    *,
    sampling: Sampling | None = None,
    eos_ids: Sequence[int] = (),
    stop_sequences: Sequence[Sequence[int]] = (),
    seed: int | None = None,
    pad_id: int = 0,
    stop: StopCheck | None = None,
) -> list[list[int]]:
    """The ids each prompt's continuation gets (the prompt excluded), in prompt order.

    A row ends after ``max_tokens`` ids, or with the first id in ``eos_ids``, a completed
    ``stop_sequences`` entry (token ids) or ``stop`` saying so; the ending ids are included.
    Prompts of different lengths run as one batch, left padded with ``pad_id`` (never attended
    to; each row counts its own positions). ``seed`` makes sampling reproducible (one uniform
    draw per row and step); the model runs in eval mode and is returned to its mode.

    :raises ValueError: an empty prompt, or a prompt plus ``max_tokens`` longer than
        ``max_position_embeddings``.
    """
    lm = language_model(model)
    sampling = sampling or Sampling()
    if not prompts or max_tokens <= 0:
        return [[] for _ in prompts]
    if any(len(prompt) == 0 for prompt in prompts):
        raise ValueError("a prompt has no tokens (give at least one, e.g. the BOS id)")
    longest = max(len(prompt) for prompt in prompts)
    limit = lm.settings.max_positions
    if longest + max_tokens > limit:
        message = f"a prompt of {longest} tokens plus {max_tokens} new ones is longer than"
        raise ValueError(f"{message} max_position_embeddings ({limit})")
    device = lm.embedding_layer.word_embeddings.weight.device
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, longest - len(prompt) :] = torch.tensor(list(prompt))
        mask[row, longest - len(prompt) :] = 1
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    eos = frozenset(eos_ids)
    was_training = lm.training
    lm.eval()
    outputs: list[list[int]] = [[] for _ in prompts]
    try:  # the cache and every step's tensors live and die inside: no autograd bookkeeping
        with torch.inference_mode():
            cache = lm.new_cache(len(prompts), longest + max_tokens)
            logits = lm.decode(ids.to(device), cache, mask.to(device), last_only=True)[:, -1]
            running = set(range(len(prompts)))
            for step in range(max_tokens):
                chosen = sampling.pick(logits, generator)
                for row, token in enumerate(chosen.tolist()):
                    if row in running:
                        outputs[row].append(token)
                        ended = _ends(outputs[row], eos, stop_sequences)
                        if ended or (stop is not None and stop(row, outputs[row])):
                            running.discard(row)
                if not running or step == max_tokens - 1:
                    break
                logits = lm.decode(chosen.view(-1, 1), cache, last_only=True)[:, -1]
    finally:
        lm.train(was_training)
    return outputs


def generate_text(
    model: nn.Module,
    tokenizer: TextTokenizer,
    prompts: Sequence[str],
    max_tokens: int,
    *,
    sampling: Sampling | None = None,
    stop_sequences: Sequence[Sequence[int]] = (),
    seed: int | None = None,
    pad_id: int | None = None,
) -> list[tuple[list[int], str]]:
    """Each prompt's generated ids and their text, stopping at the tokenizer's EOS too.

    Prompts are encoded as the tokenizer does by default (with its BOS if it adds one); the
    text is the generated ids decoded without special tokens.
    """
    encoded = [tokenizer.encode(prompt) for prompt in prompts]
    eos = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    generated = generate(
        model, encoded, max_tokens, sampling=sampling, eos_ids=eos,
        stop_sequences=stop_sequences, seed=seed,
        pad_id=tokenizer.pad_id if pad_id is None else pad_id,
    )  # fmt: skip
    return [(ids, tokenizer.decode(ids)) for ids in generated]
