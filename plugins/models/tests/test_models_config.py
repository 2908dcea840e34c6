"""Run files with Model Zoo's model sections: spellings, unknown keys and names, rules, contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plugtrain.authoring.jsonschema import run_file_schema
from plugtrain.cli import main
from plugtrain.config import check_run
from plugtrain.config.reading.yaml_loader import load_yaml
from plugtrain.errors import ConfigError
from plugtrain.registry import Registry
from plugtrain.schema import check_arguments
from plugtrain.testing import assert_plugin_contract, write_run_file
from plugtrain_models.families import FAMILIES, build_decoder
from plugtrain_models.schemas import Gpt2PathArgs, GptjPathArgs

TINY = {
    "vocab_size": 32,
    "hidden_size": 16,
    "num_heads": 2,
    "num_hidden_layers": 1,
    "filter_size": 32,
    "max_position_embeddings": 16,
}
RUN = """\
trainer:
  init:
    backend: {{backend_type: CPU}}
    model:
{model}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 1}}
  fit:
    train_dataloader: {{StdlibText: {{batch_size: 2, block_size: 8}}}}
"""


def _run_file(tmp_path: Path, model_lines: list[str]) -> Path:
    model = "\n".join(f"      {line}" for line in model_lines)
    return write_run_file(tmp_path, RUN.format(model=model))


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", str(path)])
    return code, capsys.readouterr().err


def test_the_models_plugin_is_loaded_and_keeps_the_plugin_contract(
    installed_registry: Registry,
) -> None:
    # The distribution's other plugin (gpt_data, the HDF5 data) is checked by its own tests.
    loaded = [p for p in installed_registry.plugins() if p.name == "models"]
    assert [p.distribution for p in loaded] == ["plugtrain-models"]
    assert set(FAMILIES) <= set(installed_registry.names("model"))
    assert_plugin_contract("models", installed_registry, arguments=dict.fromkeys(FAMILIES, TINY))


def test_model_zoo_spelling_checks_and_names_an_unknown_key_at_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["name: gpt3", "hidden_size: 16", "num_heads: 2", "not_a_key: 1"]
    code, err = _check(_run_file(tmp_path, lines), capsys)
    assert code != 0
    assert f"{tmp_path / 'run.yaml'}:8:7: trainer.init.model.gpt3.not_a_key: unknown" in err


def test_an_unknown_model_zoo_model_says_it_has_no_port_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _check(_run_file(tmp_path, ["name: dino"]), capsys)
    assert code != 0
    assert "Model Zoo's 'dino' has no plugtrain port yet; installed models: " in err
    assert "gpt3" in err
    assert "Did you mean" not in err


def test_a_misspelt_name_still_gets_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _check(_run_file(tmp_path, ["name: gtp3"]), capsys)
    assert code != 0
    assert "Did you mean 'gpt3'" in err


def test_model_name_is_deprecated_and_csx_only_keys_are_said_to_do_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["model_name: llama", "hidden_size: 16", "num_heads: 2", "attention_kernel: x"]
    path = _run_file(tmp_path, lines)
    code, err = _check(path, capsys)
    assert code == 0, err
    assert f"{path}:5:7: trainer.init.model.model_name: is deprecated" in err
    assert f"{path}:8:7: trainer.init.model.llama.attention_kernel: has no effect" in err
    assert err.count("has no effect") == 1


def test_the_editor_schema_takes_model_zoos_spelling(installed_registry: Registry) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(
        json.loads(json.dumps(run_file_schema(installed_registry)))
    )

    def errors(model: dict[str, Any]) -> int:
        run = load_yaml(RUN.format(model="      {}"), "<run>")
        run["trainer"]["init"]["model"] = model
        return len(list(validator.iter_errors(run)))

    assert errors({"name": "gpt3", "hidden_size": 16, "attention_kernel": "x"}) == 0
    assert errors({"model_name": "falcon", "use_untied_layer_norm": True}) == 0
    assert errors({"gpt3": {"hidden_size": 16}}) == 0
    assert errors({"name": "gpt3", "not_a_key": 1}) > 0
    assert errors({"name": "gpt3", "use_untied_layer_norm": True}) > 0  # a GPT-J-only key
    assert errors({"name": "gpt3", "num_heads": "many"}) > 0


def _problems(schema: type, **keys: Any) -> list[str]:
    return [f"{key}: {message}" for key, message in check_arguments(schema, {**TINY, **keys})]


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            {"rotary_dim": 3, "position_embedding_type": "rotary"},
            "rotary_dim: rotary_dim must be even",
        ),
        ({"extra_attention_params": {"num_kv_groups": 2}}, "needs attention_module"),
        ({"pos_scaling_type": "yarn"}, "pos_scaling_type 'yarn' is not supported"),
        ({"position_embedding_type": "relative"}, "relative positions are not supported"),
        ({"mup_base_hidden_size": 8}, "give both mup_base_hidden_size and mup_base_filter_size"),
        ({"nonlinearity": "swishy"}, "unknown nonlinearity 'swishy'"),
        ({"layer_norm_epsilon": "tiny"}, "layer_norm_epsilon: must be a number"),
        ({"moe": {"num_experts": 2, "bogus": 1}}, "unknown moe keys ['bogus']"),
        ({"use_sink_token": True}, "use_sink_token is not supported"),
        ({"use_untied_layer_norm": True}, "unknown argument 'use_untied_layer_norm'"),
        ({"initializer": {"name": "orthogonal"}}, "unknown initializer 'orthogonal'"),
    ],
)
def test_gpt2_path_rules(keys: dict[str, Any], expected: str) -> None:
    assert any(expected in p for p in _problems(Gpt2PathArgs, **keys)), _problems(
        Gpt2PathArgs, **keys
    )


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"position_embedding_type": "alibi"}, "ALiBi is not available on the GPT-J path"),
        (
            {"attention_sink_tokens": 4},
            "attention_sink_tokens needs attention_sliding_window_length",
        ),
        ({"norm_first_sandwich": True}, "unknown argument 'norm_first_sandwich'"),
    ],
)
def test_gptj_path_rules(keys: dict[str, Any], expected: str) -> None:
    assert any(expected in p for p in _problems(GptjPathArgs, **keys)), _problems(
        GptjPathArgs, **keys
    )


def test_numeric_strings_are_coerced_as_model_zoo_does() -> None:
    model = build_decoder("gptj", {**TINY, "layer_norm_epsilon": "1e-05", "rotary_dim": 2})
    assert model.model.ln_f.eps == pytest.approx(1e-5)
    assert model.settings.parallel


def test_python_construction_checks_as_a_run_file_does() -> None:
    with pytest.raises(ConfigError, match="unknown argument 'hidden_sise'"):
        build_decoder("llama", {**TINY, "hidden_sise": 16})
    with pytest.raises(ConfigError, match="hidden_size 16 is not a multiple of num_heads 3"):
        build_decoder("llama", {**TINY, "num_heads": 3})


def test_multiquery_without_groups_warns_and_uses_one_group() -> None:
    with pytest.warns(UserWarning, match="num_kv_groups: using 1"):
        model = build_decoder("starcoder", {**TINY, "attention_module": "multiquery_attention"})
    assert model.settings.num_kv_groups == 1
    assert model.model.transformer_decoder.layers[0].self_attn.proj_k_dense_layer.out_features == 8


def test_loss_weight_is_reset_under_num_tokens_with_a_warning() -> None:
    with pytest.warns(UserWarning, match="loss_weight 0.5 has no effect"):
        model = build_decoder("gpt3", {**TINY, "loss_weight": 0.5})
    assert model.settings.loss_weight == 1.0


@pytest.mark.parametrize("example", ["modelzoo_gpt3.yaml", "modelzoo_llama.yaml"])
def test_the_examples_model_sections_check_and_build(
    example: str, installed_registry: Registry
) -> None:
    """The examples' model sections as written (their HDF5 data is the data half's to test)."""
    path = Path(__file__).parents[3] / "examples" / example
    run = load_yaml(path.read_text(encoding="utf-8"), str(path))
    model = run["trainer"]["init"]["model"]
    lines = [f"{key}: {json.dumps(value)}" for key, value in model.items()]
    text = RUN.format(model="\n".join(f"      {line}" for line in lines))
    plans = check_run(load_yaml(text, str(path)), installed_registry, str(path))
    arguments = {k: v for k, v in model.items() if k != "name"}
    built = build_decoder(model["name"], arguments)
    assert plans[0].model.name == model["name"]
    assert built.settings.max_positions == 128
