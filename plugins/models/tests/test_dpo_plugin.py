"""The ``dpo`` plugin keeps the plugin contract: schema = signature, torch-free, round trip."""

from __future__ import annotations

from plugtrain.registry import Registry
from plugtrain.testing import assert_plugin_contract

TINY_POLICY = {
    "name": "llama", "vocab_size": 64, "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1,
    "filter_size": 48, "max_position_embeddings": 16, "position_embedding_type": "rotary",
}  # fmt: skip


def test_the_dpo_plugin_keeps_the_plugin_contract(installed_registry: Registry) -> None:
    loaded = [p for p in installed_registry.plugins() if p.name == "dpo"]
    assert [p.distribution for p in loaded] == ["plugtrain-models"]
    assert "dpo" in installed_registry.names("model")
    assert "DpoHDF5DataProcessor" in installed_registry.names("dataloader")
    arguments = {"dpo": {"policy_model": TINY_POLICY, "dpo": {"beta": 0.2}}}
    assert_plugin_contract("dpo", installed_registry, arguments=arguments)
