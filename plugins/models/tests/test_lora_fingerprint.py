"""The LoRA base's fingerprint: taken at the first save, not when the base loads, same value."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from plugtrain_models.families import build_decoder
from plugtrain_models.lora import callback as lora_callback
from plugtrain_models.lora.apply import is_adapter
from plugtrain_models.lora.callback import Lora
from plugtrain_models.lora.checkpoints import base_fingerprint

KEYS = {
    "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1, "num_heads": 4,
    "filter_size": 48, "max_position_embeddings": 32,
}  # fmt: skip


def _loaded(adapter_only: bool) -> tuple[Lora, Any, dict[str, torch.Tensor]]:
    """A Lora callback whose model has just loaded a base (a checkpoint without adapters)."""
    torch.manual_seed(0)
    lora = Lora(lora_params={"r": 2, "target_modules": ["Linear"]},
                adapter_only_checkpoints=adapter_only)  # fmt: skip
    trainer = SimpleNamespace(seed=0, unwrapped_model=None)
    trainer.unwrapped_model = lora.on_model_built(trainer, build_decoder("llama", KEYS))
    base = {
        n: torch.randn_like(t)
        for n, t in trainer.unwrapped_model.state_dict().items()
        if not is_adapter(n)
    }
    parts: dict[str, Any] = {"model": dict(base)}
    lora.on_before_load_checkpoint(trainer, parts)
    trainer.unwrapped_model.load_state_dict(parts["model"])
    loaded = trainer.unwrapped_model.state_dict()  # tied weights hold the last value given
    assert base_fingerprint(loaded) != base_fingerprint(build_decoder("llama", KEYS).state_dict())
    return lora, trainer, {n: t.clone() for n, t in loaded.items() if not is_adapter(n)}


@pytest.mark.parametrize("adapter_only", [False, True], ids=["whole", "adapter-only"])
def test_the_base_is_fingerprinted_at_the_first_save_as_it_was_loaded(
    monkeypatch: pytest.MonkeyPatch, adapter_only: bool
) -> None:
    lora, trainer, base = _loaded(adapter_only)
    calls: list[int] = []

    def counted(state: Any) -> str:
        calls.append(1)
        return base_fingerprint(state)

    monkeypatch.setattr(lora_callback, "base_fingerprint", counted)
    lora.on_load_checkpoint(trainer, "base.mdl")
    assert calls == []
    assert lora.base == {"path": "base.mdl", "fingerprint": None}
    lora.on_before_save_checkpoint(trainer, 1)
    expected = base_fingerprint(base)
    assert lora.state_dict()["base"] == {"path": "base.mdl", "fingerprint": expected}
    lora.on_after_save_checkpoint(trainer, 1)
    lora.on_before_save_checkpoint(trainer, 2)
    assert len(calls) == 1  # once per run


def test_asking_for_the_state_fingerprints_the_whole_base_even_while_saving() -> None:
    lora, trainer, base = _loaded(adapter_only=True)
    lora.on_load_checkpoint(trainer, "base.mdl")
    lora._saving = True  # the model's state holds the adapters only while a save runs
    assert lora.state_dict()["base"]["fingerprint"] == base_fingerprint(base)
    assert lora._saving


def test_a_later_load_drops_the_unfingerprinted_base() -> None:
    lora, trainer, _ = _loaded(adapter_only=False)
    lora.on_load_checkpoint(trainer, "base.mdl")
    own = trainer.unwrapped_model.state_dict()
    lora.on_before_load_checkpoint(trainer, {"model": {n: t.clone() for n, t in own.items()}})
    lora.load_state_dict({"base": {"path": "other.mdl", "fingerprint": "f" * 64}})
    assert lora.state_dict()["base"] == {"path": "other.mdl", "fingerprint": "f" * 64}
