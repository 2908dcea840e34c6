"""plugtrain's own decoder as an lm-eval ``LM``: log-likelihoods, rolling ones and generation.

Tokenisation follows lm-eval's own ``hf`` model of the pinned lm-eval (0.4.13) so that the
numbers compare: a context and continuation are encoded together and split where the context
ends; a string is encoded with the tokenizer's defaults, so a tokenizer that adds BOS by default
gets it (0.4.13's rule); an empty context becomes the BOS id (EOS without one). Sequences
longer than ``max_length`` keep their last tokens. Generation is greedy unless the request (or
the harness's ``temperature``/``top_k``/``top_p``) asks for sampling, then Model Zoo's rules
(:mod:`plugtrain_models.generation.sampling`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import (
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
)
from torch import nn

from plugtrain_models.generation.decode import generate, language_model
from plugtrain_models.generation.sampling import Sampling
from plugtrain_models.generation.text import TextTokenizer

__all__ = ["GenerationOverrides", "PlugtrainLM"]

GenerationOverrides = dict[str, Any]
"""The harness's ``max_tokens``, ``temperature``, ``top_k``, ``top_p`` (``None``: the task's)."""

Request = tuple[tuple[str, str] | None, list[int], list[int]]


class PlugtrainLM(TemplateLM):  # type: ignore[misc]
    """An lm-eval language model that runs a plugtrain-models decoder in this process."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: TextTokenizer,
        *,
        batch_size: int = 1,
        max_length: int | None = None,
        overrides: GenerationOverrides | None = None,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        self.decoder = language_model(model)
        self.text = tokenizer
        self.tokenizer = tokenizer.hf  # lm-eval reads chat templates from it
        self.batch_size = batch_size
        limit = self.decoder.settings.max_positions
        self.max_length = min(max_length or limit, limit)
        self.overrides = dict(overrides or {})
        self.seed = seed

    # -- what lm-eval reads of a model -------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        """The EOS id (ends generation; lm-eval's end-of-text)."""
        if self.text.eos_id is None:
            raise ValueError(f"{self.text.name}: the tokenizer has no EOS id (set eos_id)")
        return self.text.eos_id

    @property
    def prefix_token_id(self) -> int:
        """What an empty context becomes: the BOS id, else EOS (as lm-eval's ``hf`` model)."""
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return int(bos) if bos is not None else self.eot_token_id

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer's name, as lm-eval's cache keys want it."""
        return self.text.name.replace("/", "__")

    def tok_encode(
        self, string: str, add_special_tokens: bool | None = None, **_kwargs: Any
    ) -> list[int]:
        """The ids of ``string``: the tokenizer's defaults unless told, no BOS twice."""
        if add_special_tokens is None:
            bos = getattr(self.tokenizer, "bos_token", None)
            add_special_tokens = not (bos and string.startswith(bos))
        return self.text.encode(string, add_special_tokens)

    def tok_decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` without special tokens."""
        return self.text.decode(list(ids))

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """The chat rendered with the tokenizer's template (needs a tokenizer folder)."""
        if self.tokenizer is None:
            raise ValueError("apply_chat_template needs a Hugging Face tokenizer folder")
        rendered = self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )  # fmt: skip
        return str(rendered)

    # -- scoring -------------------------------------------------------------------------------

    @torch.no_grad()
    def _loglikelihood_tokens(
        self, requests: list[Request], disable_tqdm: bool = False, **_kwargs: Any
    ) -> list[tuple[float, bool]]:
        """Sum of the continuation's log-probabilities, and whether greedy picks it all."""
        order = sorted(range(len(requests)), key=lambda i: -len(requests[i][1] + requests[i][2]))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(requests)
        device = self.decoder.embedding_layer.word_embeddings.weight.device
        for first in range(0, len(order), self.batch_size):
            chunk = order[first : first + self.batch_size]
            inputs = [
                (requests[i][1] + requests[i][2])[-(self.max_length + 1) :][:-1] for i in chunk
            ]
            width = max(len(ids) for ids in inputs)
            batch = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, ids in enumerate(inputs):
                batch[row, : len(ids)] = torch.tensor(ids)
            logits = self.decoder(batch.to(device))[0]
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            for row, index in enumerate(chunk):
                continuation = requests[index][2]
                end = len(inputs[row])
                scored = log_probs[row, end - len(continuation) : end]
                target = torch.tensor(continuation, device=scored.device)
                greedy = bool((scored.argmax(-1) == target).all())
                total = float(scored.gather(-1, target.unsqueeze(-1)).sum())
                results[index] = (total, greedy)
        return results

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each string's total log-likelihood, in windows of ``max_length`` (as lm-eval's)."""
        totals = []
        for (string,) in (request.args for request in requests):
            windows = [
                (None, *lm_utils.make_disjoint_window(window))
                for window in lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length, context_len=1,
                )
            ]  # fmt: skip
            totals.append(sum(score for score, _ in self._loglikelihood_tokens(windows)))
        return totals

    def _sampling(self, kwargs: dict[str, Any]) -> Sampling:
        values = {key: self.overrides.get(key) for key in ("temperature", "top_k", "top_p")}
        if any(value is not None for value in values.values()):
            return Sampling(**values)
        if kwargs.get("do_sample") and kwargs.get("temperature"):
            return Sampling(temperature=float(kwargs["temperature"]), top_k=kwargs.get("top_k"),
                            top_p=kwargs.get("top_p"))  # fmt: skip
        return Sampling()

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Each context's continuation up to its first stop string (EOS's text included).

        Requests with the same generation settings run ``batch_size`` at a time (left padded;
        a prompt gets the ids it gets alone).
        """
        eos_text = self.text.hf.decode([self.eot_token_id]) if self.text.hf is not None else None
        answers: list[str] = [""] * len(requests)
        pending = list(enumerate(request.args for request in requests))
        while pending:
            settings = pending[0][1][1]
            group = [item for item in pending if item[1][1] == settings][: self.batch_size]
            taken = {index for index, _ in group}
            pending = [item for item in pending if item[0] not in taken]
            kwargs = normalize_gen_kwargs(settings, self.overrides.get("max_tokens") or 256)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            budget = int(self.overrides.get("max_tokens") or kwargs.pop("max_gen_toks"))
            prompts = [self.tok_encode(context)[-(self.max_length - budget) :]
                       for _, (context, _) in group]  # fmt: skip

            def stop(_row: int, ids: list[int], until: list[str] = until) -> bool:
                text = self.tok_decode(ids)
                return any(term and term in text for term in until)

            generated = generate(
                self.decoder, prompts, budget, sampling=self._sampling(kwargs),
                eos_ids=[self.eot_token_id], seed=self.seed, stop=stop,
                pad_id=self.text.pad_id,
            )  # fmt: skip
            for (index, _), ids in zip(group, generated, strict=True):
                answers[index] = postprocess_generated_text(self.tok_decode(ids), until, None)
        return answers
