"""LoRA layers and the ``Lora`` callback: PEFT as the oracle, targeting, freezing, merging."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

import peft
import transformers
from support.hf_models import LOGITS_ATOL, ids, random_hf_model, save_hf

import plugtrain
from plugtrain.conversion import hf_to_plugtrain
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import adaptable_layers, apply_lora, is_adapter
from plugtrain_models.lora.callback import Lora
from plugtrain_models.lora.config import lora_configs
from plugtrain_models.lora.layers import LoraEmbedding, LoraLinear, lora_layers

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
PEFT_TO_PLUGTRAIN = {
    "model.embed_tokens": "model.embedding_layer.word_embeddings",
    "self_attn.o_proj": "self_attn.proj_output_dense_layer",
    "self_attn.v_proj": "self_attn.proj_v_dense_layer",
    "mlp.down_proj": "ffn.ffn.1.linear_layer",
    "model.layers": "model.transformer_decoder.layers",
    "lm_head": "lm_head",
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """A tiny random Llama (transformers) and the same weights as a plugtrain state."""
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    folder = save_hf(hf, tmp_path_factory.mktemp("hf") / "llama")
    return hf, hf_to_plugtrain(folder)


def _plugtrain_model(converted: Any) -> Any:
    model = build_decoder("llama", converted.model_keys)
    model.load_state_dict(converted.state)
    return model


def _plugtrain_name(peft_module: str) -> str:
    name = peft_module.removeprefix("base_model.model.")
    for theirs, ours in PEFT_TO_PLUGTRAIN.items():
        name = name.replace(theirs, ours)
    return name if name.startswith("model.") else f"model.{name}"


def test_the_forward_equals_peft_with_the_same_adapters(llama: tuple[Any, Any]) -> None:
    hf, converted = llama
    config = peft.LoraConfig(
        r=4, lora_alpha=12, target_modules=["o_proj", "v_proj", "down_proj", "embed_tokens"]
    )  # q_proj and k_proj are left to the export test: their rows are reordered on conversion
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = peft.get_peft_model(hf, config).eval()
    ours = _plugtrain_model(converted)
    apply_lora(
        ours,
        lora_configs({"r": 4, "alpha": 12, "target_modules": ["*proj_[ov]*_dense_layer"]})
        + lora_configs({"r": 4, "alpha": 12, "target_modules": ["ffn.1.linear_layer"]})
        + lora_configs({"r": 4, "alpha": 12, "target_modules": ["word_embeddings"]}),
    )
    ours.eval()
    generator = torch.Generator().manual_seed(7)
    layers = lora_layers(ours)
    copied = 0
    for name, module in reference.named_modules():
        if not hasattr(module, "lora_A") or (not module.lora_A and not module.lora_embedding_A):
            continue
        mine = layers[_plugtrain_name(name)]
        if isinstance(mine, LoraEmbedding):
            a, b = module.lora_embedding_A["default"], module.lora_embedding_B["default"]
        else:
            a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
        with torch.no_grad():  # B is zero at initialisation: give both sides the same non-zero B
            b.normal_(0, 0.3, generator=generator)
            a.normal_(0, 0.3, generator=generator)
            mine.lora_A.copy_(a)
            mine.lora_B.copy_(b)
        copied += 1
    assert copied == 2 * 3 + 1 == len(layers)
    tokens = ids()
    with torch.no_grad():
        expected = reference(tokens).logits
        got = ours.logits(tokens)
        plain = _plugtrain_model(converted).eval().logits(tokens)
    assert (got - plain).abs().max() > 0.1  # the adapters change the logits ...
    torch.testing.assert_close(got, expected, atol=LOGITS_ATOL, rtol=1e-5)  # ... as PEFT's do


def test_modelzoo_class_names_select_the_layers_modelzoo_selects(llama: tuple[Any, Any]) -> None:
    _, converted = llama
    cases = {
        ("MultiQueryAttention", "Linear"): 4 * 2,
        ("MultiheadAttention", "Linear"): 4 * 2,
        ("FeedForwardNetwork", "Linear"): 3 * 2,
        ("SingleFeedForwardLayer",): 3 * 2,
        ("TransformerDecoderLayer", "Linear"): 7 * 2,
        ("EmbeddingLayer",): 1,
        ("Embedding",): 1,
        ("*.proj_q_dense_layer",): 2,
        ("layers.1.*", "Linear"): 7,
        ("lm_head",): 1,
    }
    for targets, count in cases.items():
        model = _plugtrain_model(converted)
        report = apply_lora(model, lora_configs({"r": 2, "target_modules": list(targets)}))
        assert len(report["layers"]) == count, targets
    model = _plugtrain_model(converted)
    assert len(apply_lora(model, lora_configs({"r": 2}))["layers"]) == 7 * 2 + 2  # null: all


def test_first_matching_group_wins_and_r_0_groups_add_nothing(llama: tuple[Any, Any]) -> None:
    _, converted = llama
    model = _plugtrain_model(converted)
    groups = [
        {"r": 0, "target_modules": ["layers.0.*"]},
        {"r": 2, "alpha": 4, "target_modules": ["MultiheadAttention", "Linear"]},
        {"r": 6, "alpha": 3},
    ]
    apply_lora(model, lora_configs(groups))
    layers = lora_layers(model)
    assert not [n for n in layers if ".layers.0." in n]
    assert layers["model.transformer_decoder.layers.1.self_attn.proj_k_dense_layer"].scaling == 2
    head = layers["model.lm_head"]
    assert isinstance(head, LoraLinear)
    assert head.lora_A.shape == (6, 64)
    assert head.lora_B.shape == (128, 6)
    assert head.scaling == 0.5


def test_targets_matching_nothing_and_too_large_r_are_refused_by_name(
    llama: tuple[Any, Any],
) -> None:
    _, converted = llama
    model = _plugtrain_model(converted)
    with pytest.raises(ValueError, match="match no Linear or Embedding") as caught:
        apply_lora(model, lora_configs({"r": 2, "target_modules": ["proj_z_dense_layer"]}))
    for listed in ("MultiQueryAttention", "FeedForwardNetwork", "proj_q_dense_layer", "lm_head"):
        assert listed in str(caught.value)
    with pytest.raises(ValueError, match=r"r=80 is larger than the smaller side of .*\(32x64\)"):
        apply_lora(model, lora_configs({"r": 80, "target_modules": ["proj_k_dense_layer"]}))


def test_initialisation_freezing_and_the_state_keys(llama: tuple[Any, Any]) -> None:
    _, converted = llama
    model = _plugtrain_model(converted)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    groups = [{"r": 4, "target_modules": [name]} for name in ("proj_q_dense_layer", "Embedding")]
    apply_lora(model, lora_configs(groups))
    state = model.state_dict()
    added = sorted(set(state) - set(before))
    assert added == sorted(
        f"{layer}.{ab}"
        for layer in (
            "model.embedding_layer.word_embeddings",
            "model.transformer_decoder.layers.0.self_attn.proj_q_dense_layer",
            "model.transformer_decoder.layers.1.self_attn.proj_q_dense_layer",
        )
        for ab in ("lora_A", "lora_B")
    )
    assert all(torch.equal(state[k], v) for k, v in before.items())  # the base is untouched
    q = lora_layers(model)["model.transformer_decoder.layers.0.self_attn.proj_q_dense_layer"]
    bound = 1 / 64**0.5  # kaiming_uniform(a=sqrt(5)) on fan_in 64
    assert 0 < q.lora_A.abs().max() <= bound
    assert not q.lora_B.any()
    table = lora_layers(model)["model.embedding_layer.word_embeddings"]
    assert not table.lora_A.any()
    assert table.lora_B.std() > 0.5
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(added)
    assert all(is_adapter(n) for n in trainable)


def test_merge_weights_merges_on_eval_and_restores_the_exact_weight(
    llama: tuple[Any, Any],
) -> None:
    _, converted = llama
    model = _plugtrain_model(converted)
    apply_lora(model, lora_configs({"r": 4, "alpha": 8, "merge_weights": True}))
    for layer in lora_layers(model).values():
        with torch.no_grad():
            layer.lora_B.normal_(0, 0.2, generator=torch.Generator().manual_seed(1))
            layer.lora_A.normal_(0, 0.2, generator=torch.Generator().manual_seed(2))
    original = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    tokens = ids()
    with torch.no_grad():
        unmerged = model.logits(tokens)
        model.eval()
        head = lora_layers(model)["model.lm_head"]
        assert head.merged
        assert not torch.equal(head.weight, original["model.lm_head.weight"])
        merged = model.logits(tokens)
    torch.testing.assert_close(merged, unmerged, atol=LOGITS_ATOL, rtol=1e-5)
    model.train()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in original.items())


class _Losses:
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.losses.append(float(metrics["loss"]))


def _batches(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(11)
    batches = []
    for _ in range(count):
        tokens = torch.randint(0, 128, (2, 17), generator=generator)
        batches.append(
            {
                "input_ids": tokens[:, :-1],
                "labels": tokens[:, 1:],
                "attention_mask": torch.ones_like(tokens[:, 1:]),
            }
        )
    return batches


def test_ten_steps_train_only_the_adapters(
    llama: tuple[Any, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, converted = llama
    model = build_decoder("llama", converted.model_keys)
    base_file = tmp_path / "base.mdl"
    torch.save({"model": converted.state}, base_file)
    losses = _Losses()
    lora = Lora(lora_params={"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["Linear"]})
    caplog.set_level(logging.INFO, logger="plugtrain")
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "run",
        model=model,
        optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.01, weight_decay=0.1),
        loop={"max_steps": 10},
        logging={"log_steps": 1},
        checkpoint={"steps": 10},
        callbacks=[lora, losses],
        seed=3,
    )
    trainer.fit(_batches(1) * 10, ckpt_path=str(base_file))
    assert losses.losses[-1] < losses.losses[0] - 0.5  # one batch, ten times: it learns it
    state = model.state_dict()
    for name, tensor in converted.state.items():
        assert torch.equal(state[name], tensor), name  # bit-equal to the base
    adapters = {n: p for n, p in model.named_parameters() if is_adapter(n)}
    assert adapters
    assert all(p.requires_grad for p in adapters.values())
    assert all(p.any() for n, p in adapters.items() if n.endswith("lora_B"))  # B moved off 0
    held = {id(p) for p in trainer.optimizer.state}
    assert held == {id(p) for p in adapters.values()}  # optimizer state for adapters only
    count = sum(p.numel() for p in adapters.values())
    text = caplog.text
    assert f"{count} of {sum(p.numel() for p in model.parameters())} parameters train" in text
    assert f"86.3k parameters ({count / 1000:.3g}k train)" in text  # the fit summary
    assert "the checkpoint holds no adapters" in text


def test_a_model_built_with_the_same_seed_gets_the_same_adapters(
    llama: tuple[Any, Any],
) -> None:
    _, converted = llama
    first, second = (_plugtrain_model(converted) for _ in range(2))
    torch.manual_seed(0)
    apply_lora(first, lora_configs({"r": 3}), seed=9)
    torch.manual_seed(1)  # the global generator plays no part
    apply_lora(second, lora_configs({"r": 3}), seed=9)
    a, b = first.state_dict(), second.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert {len(adaptable_layers(first))} == {len(adaptable_layers(second))}


def test_the_callback_passes_the_conformance_kit() -> None:
    from plugtrain.testing import check_callback

    report = check_callback(Lora, {"lora_params": {"r": 2, "alpha": 4}}, name="Lora")
    assert {r.name: r.outcome for r in report.results}["hooks_in_order"] == "passed"
