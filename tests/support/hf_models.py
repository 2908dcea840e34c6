"""Tiny random transformers models saved to local folders, and the checks every converter passes.

Each model has every parameter drawn from N(0, 0.2) (norm weights + 1), so that a wrong row
order, activation or norm shows in the logits. Nothing is downloaded.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import transformers

__all__ = [
    "LOGITS_ATOL",
    "assert_converts_both_ways",
    "hf_logits",
    "ids",
    "random_hf_model",
    "save_hf",
]

LOGITS_ATOL = 1e-4
"""float32 logits of two implementations of the same function, ~1e-6 apart in practice; the
bound the models' own logits tests defend."""


def ids(vocab: int = 128) -> torch.Tensor:
    """A fixed batch of token ids."""
    return torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(1))


def random_hf_model(config_class: Any, model_class: Any, **config: Any) -> Any:
    """A tiny HF model with every parameter N(0, 0.2), norm weights + 1, in eval mode."""
    torch.manual_seed(0)
    model = model_class(config_class(attn_implementation="eager", **config)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.2)
            leaf = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            is_norm = "norm" in leaf or leaf.startswith("ln")
            if is_norm and name.endswith("weight") and parameter.ndim == 1:
                parameter.add_(1.0)
    return model


def save_hf(model: Any, folder: Path, **options: Any) -> Path:
    """``model.save_pretrained(folder)`` without its progress output; the folder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder, **options)
    return folder


def hf_logits(folder_or_model: Any, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of an HF model (or of the folder, loaded with eager attention)."""
    model = folder_or_model
    if isinstance(folder_or_model, str | Path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.AutoModelForCausalLM.from_pretrained(
                folder_or_model, attn_implementation="eager"
            ).eval()
    with torch.no_grad():
        return model(tokens).logits


def assert_converts_both_ways(hf_model: Any, folder: Path, vocab: int = 128) -> dict[str, Any]:
    """The checks every converter passes, on a saved HF model; returns what they measured.

    HF -> plugtrain logits equal transformers'; the exported folder loads with ``from_pretrained``
    and gives plugtrain's logits; plugtrain -> HF -> plugtrain is bit-equal on every tensor.
    """
    from plugtrain.conversion import export_hf, hf_to_plugtrain
    from plugtrain.discovery.loading import get_registry

    tokens = ids(vocab)
    converted = hf_to_plugtrain(folder)
    factory = get_registry().resolve("model", converted.model_name)
    model = factory(**converted.model_keys).eval()
    model.load_state_dict(converted.state)
    with torch.no_grad():
        ours = model.logits(tokens)
    reference = hf_logits(hf_model, tokens)
    torch.testing.assert_close(ours, reference, atol=LOGITS_ATOL, rtol=1e-5)
    exported = folder.parent / f"{folder.name}-exported"
    export_hf(model.state_dict(), converted.converter, converted.model_keys, exported)
    torch.testing.assert_close(hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=1e-5)
    again = hf_to_plugtrain(exported)
    assert again.model_keys == converted.model_keys
    assert set(again.state) == set(model.state_dict())
    changed = [k for k, v in model.state_dict().items() if not torch.equal(again.state[k], v)]
    return {
        "logits_error": float((ours - reference).abs().max()),
        "changed_on_round_trip": changed,
        "converter": converted.converter,
        "exported": exported,
        "model": model,
    }
