"""What a converter refuses, and how it says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("safetensors")

from support.plugtrain_cli import run_plugtrain

from plugtrain.conversion import ConversionError, export_hf, hf_to_plugtrain
from plugtrain.conversion.configs import hf_to_plugtrain_config, normalise_hf_config
from plugtrain.conversion.lookup import find_converter
from plugtrain.discovery.loading import get_registry

LLAMA_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


def _llama(**changes: object) -> tuple[dict, list[str]]:
    _, converter = find_converter(get_registry(), "llama", None)
    return hf_to_plugtrain_config(converter, normalise_hf_config({**LLAMA_JSON, **changes}))


def test_both_transformers_config_styles_read_the_same() -> None:
    old, _ = _llama(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=5e5)
    new_style = {k: v for k, v in LLAMA_JSON.items() if k != "rope_theta"}
    parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}
    _, converter = find_converter(get_registry(), "llama", None)
    new, _ = hf_to_plugtrain_config(
        converter, normalise_hf_config({**new_style, "rope_parameters": parameters})
    )
    assert old == new
    assert new["pos_scaling_type"] == "linear"
    assert new["pos_scaling_factor"] == 2.0
    assert new["rope_theta"] == 5e5


def test_an_unsupported_rope_scaling_type_is_an_error_naming_the_key() -> None:
    with pytest.raises(ConversionError, match="rope_scaling type 'dynamic' is not supported"):
        _llama(rope_scaling={"rope_type": "dynamic", "factor": 2.0})


def test_another_architecture_is_refused_naming_model_type() -> None:
    with pytest.raises(ConversionError, match="model_type is 'mistral'"):
        _llama(model_type="mistral")


def test_unknown_config_keys_are_listed_as_dropped() -> None:
    keys, dropped = _llama(bos_token_id=1, my_research_flag=True)
    assert dropped == ["my_research_flag"]
    assert "my_research_flag" not in keys


def test_export_refuses_what_the_hugging_face_model_cannot_compute(tmp_path: Path) -> None:
    from plugtrain_models.families import build_decoder

    keys = {
        "vocab_size": 128, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 1,
        "filter_size": 96, "position_embedding_type": "rotary", "norm_type": "rmsnorm",
        "nonlinearity": "swiglu", "use_bias_in_output": False, "use_ffn_bias": False,
        "use_projection_bias_in_attention": False, "use_ffn_bias_in_attention": False,
        "share_embedding_weights": False, "rotary_dim": 16,
    }  # fmt: skip
    state = build_decoder("llama", keys).state_dict()
    for change, named in (
        ({"attention_logit_softcapping": 5.0}, "model.attention_logit_softcapping = 5.0"),
        ({"rotary_dim": 8}, "model.rotary_dim = 8"),
        ({"rotary_dim": None}, r"model.rotary_dim = None \(4 wide\)"),
        ({"norm_type": "layernorm"}, "model.norm_type is 'layernorm'"),
    ):
        with pytest.raises(ConversionError, match=named):
            export_hf(state, "llama", {**keys, **change}, tmp_path / str(len(change)))
        assert not (tmp_path / str(len(change))).exists()


def test_a_checkpoint_missing_a_tensor_is_named(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**LLAMA_JSON, "num_hidden_layers": 1}))
    save_file(
        {"model.embed_tokens.weight": torch.zeros(128, 64)}, str(folder / "model.safetensors")
    )
    with pytest.raises(ConversionError, match=r"the checkpoint lacks .*proj_q_dense_layer"):
        hf_to_plugtrain(folder)
    save_file({"model.unknown.weight": torch.zeros(2)}, str(folder / "model.safetensors"))
    with pytest.raises(ConversionError, match=r"no rule of the converter matches model\.unknown"):
        hf_to_plugtrain(folder)


@pytest.mark.slow
def test_the_command_line_names_what_it_cannot_do(tmp_path: Path) -> None:
    cs = run_plugtrain(
        "checkpoint", "convert", "x.mdl", "--model", "llama", "--src-fmt", "cs-2.9",
        "--tgt-fmt", "hf", "--config", "params.yaml", cwd=tmp_path,
    )  # fmt: skip
    assert cs.returncode == 1
    assert "needs cerebras.pytorch" in cs.stderr
    assert "Traceback" not in cs.stderr
    listed = run_plugtrain("checkpoint", "list-converters", "llama", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("llama (also llamaV2, code-llama, wizardlm): hf <-> plugtrain")
    probe = (
        "import sys; from plugtrain.cli import main; "
        "main(['checkpoint', 'list-converters', '--hide-notes']); "
        "sys.exit(3 if 'torch' in sys.modules else 0)"
    )
    torch_free = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True
    )
    assert torch_free.returncode == 0, "listing converters imported torch"


def test_an_export_missing_a_tensor_of_the_model_is_refused(tmp_path: Path) -> None:
    from plugtrain_models.families import build_decoder

    keys = {"vocab_size": 128, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 1,
            "filter_size": 96}  # fmt: skip
    state = build_decoder("gpt2", keys).state_dict()
    del state["model.transformer_decoder.layers.0.ffn.ffn.1.linear_layer.weight"]
    with pytest.raises(ConversionError, match=r"lacks transformer_decoder\.layers\.0\.ffn\.ffn\.1"):
        export_hf(state, "gpt2", keys, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.iterdir())  # no staging folder left behind
