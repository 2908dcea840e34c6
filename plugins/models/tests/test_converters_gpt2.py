"""GPT-2 (gpt3), StarCoder/SantaCoder (GPTBigCode), JAIS and BTLM converters (tiny local models).

GPT-2 and GPTBigCode are checked against transformers. JAIS and BTLM have no transformers class
(their modeling code is Hub remote code), so they are checked against :func:`_alibi_hf_logits`,
their forward transcribed from that code, reading a Hugging Face folder's ``config.json`` and
tensors by their Hugging Face names: in both directions, on folders written by hand and by export.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional

pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

import transformers  # noqa: E402
from support.hf_models import (  # noqa: E402
    LOGITS_ATOL,
    assert_converts_both_ways,
    hf_logits,
    ids,
    random_hf_model,
    save_hf,
)

from plugtrain.conversion import ConversionError, export_hf, hf_to_plugtrain  # noqa: E402
from plugtrain.conversion.configs import (  # noqa: E402
    hf_to_plugtrain_config,
    plugtrain_to_hf_config,
)
from plugtrain.conversion.lookup import (  # noqa: E402
    complete_model_keys,
    find_converter,
    model_defaults,
)
from plugtrain.discovery.loading import get_registry  # noqa: E402

V, H, NH, L, P, F = 128, 64, 4, 2, 64, 96
GPT2 = {"vocab_size": V, "n_embd": H, "n_layer": L, "n_head": NH, "n_positions": P, "n_inner": F}
SHARED_KEYS = {
    "vocab_size": V,
    "hidden_size": H,
    "num_heads": NH,
    "num_hidden_layers": L,
    "max_position_embeddings": P,
    "filter_size": F,
}
RTOL = 1e-5


def _build(converted: Any) -> Any:
    factory = get_registry().resolve("model", converted.model_name)
    model = factory(**converted.model_keys).eval()
    model.load_state_dict(converted.state)
    return model


def _random_plugtrain(family: str, **keys: Any) -> Any:
    """A plugtrain model with every trainable parameter N(0, 0.2) (norm weights + 1), eval mode."""
    model = get_registry().resolve("model", family)(**SHARED_KEYS, **keys).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.normal_(0.0, 0.2)
                if ("norm" in name or "ln_f" in name) and name.endswith("weight"):
                    parameter.add_(1.0)
    return model


def _logits(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.logits(tokens)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update(safetensors_torch.load_file(file))
    return found


def _assert_bit_equal(state: dict[str, torch.Tensor], again: dict[str, torch.Tensor]) -> None:
    assert set(again) == set(state)
    changed = [name for name, tensor in state.items() if not torch.equal(again[name], tensor)]
    assert changed == []


# ------------------------------------------------------------------------ GPT-2, GPTBigCode

GPT2_CASES = {
    "gpt2-default-gelu-new-tied": {**GPT2},
    "gpt2-untied-exact-gelu-layer-scaled": {
        **GPT2, "activation_function": "gelu", "tie_word_embeddings": False,
        "scale_attn_by_inverse_layer_idx": True, "layer_norm_epsilon": 1e-6,
    },
}  # fmt: skip


@pytest.mark.parametrize("case", list(GPT2_CASES))
def test_gpt2_converts_both_ways_with_transformers_logits(case: str, tmp_path: Path) -> None:
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2_CASES[case])
    measured = assert_converts_both_ways(hf, save_hf(hf, tmp_path / case))
    assert measured["converter"] == "gpt2"
    assert measured["changed_on_round_trip"] == []


# Named explicitly: both converters read model_type gpt_bigcode, and a folder alone gives the
# first in name order (santacoder); aliases resolve to their key.
BIGCODE_CASES = {
    # the default activation, gelu_pytorch_tanh, is the tanh GELU: plugtrain's gelu_new
    "starcoder-multi-query": ("wizardcoder", "starcoder", {**GPT2}),
    "starcoder-multi-head": ("starcoder", "starcoder", {**GPT2, "multi_query": False}),
    "santacoder-untied": ("santacoder", "santacoder", {**GPT2, "tie_word_embeddings": False}),
}


@pytest.mark.parametrize("case", list(BIGCODE_CASES))
def test_gpt_bigcode_converts_both_ways_with_transformers_logits(case: str, tmp_path: Path) -> None:
    name, key, config = BIGCODE_CASES[case]
    hf = random_hf_model(
        transformers.GPTBigCodeConfig, transformers.GPTBigCodeForCausalLM, **config
    )
    folder = save_hf(hf, tmp_path / case)
    tokens = ids(V)
    converted = hf_to_plugtrain(folder, name)
    assert (converted.converter, converted.model_name) == (key, key)
    model = _build(converted)
    ours = _logits(model, tokens)
    torch.testing.assert_close(ours, hf_logits(hf, tokens), atol=LOGITS_ATOL, rtol=RTOL)
    exported = export_hf(model.state_dict(), key, converted.model_keys, tmp_path / "exported")
    torch.testing.assert_close(hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=RTOL)
    again = hf_to_plugtrain(exported, key)
    assert again.model_keys == converted.model_keys
    _assert_bit_equal(model.state_dict(), again.state)


def test_gpt2_reads_the_published_layout_without_the_transformer_prefix(tmp_path: Path) -> None:
    # openai-community/gpt2's file was saved from GPT2Model, with its causal-mask buffers, under
    # a GPT2LMHeadModel config: names are "h.0.attn.c_attn.weight", "h.0.attn.bias", "wte.weight"
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2)
    folder = tmp_path / "published"
    hf.config.architectures = ["GPT2LMHeadModel"]
    hf.config.save_pretrained(folder)
    state = {
        name.removeprefix("transformer."): tensor.contiguous()
        for name, tensor in hf.state_dict().items()
        if name != "lm_head.weight"
    }
    for layer in range(L):
        state[f"h.{layer}.attn.bias"] = torch.ones(1, 1, P, P, dtype=torch.uint8).tril()
    safetensors_torch.save_file(state, folder / "model.safetensors")
    converted = hf_to_plugtrain(folder)
    assert converted.converter == "gpt2"
    tokens = ids(V)
    torch.testing.assert_close(
        _logits(_build(converted), tokens), hf_logits(hf, tokens), atol=LOGITS_ATOL, rtol=RTOL
    )


def test_gpt2_headless_import_makes_the_tied_head_and_export_drops_it(tmp_path: Path) -> None:
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2)
    folder = save_hf(hf.transformer, tmp_path / "base")  # GPT2Model: no head, no prefix
    converted = hf_to_plugtrain(folder)
    assert converted.converter == "gpt2-headless"
    model = _build(converted)
    tokens = ids(V)
    ours = _logits(model, tokens)
    torch.testing.assert_close(ours, hf_logits(hf, tokens), atol=LOGITS_ATOL, rtol=RTOL)
    exported = export_hf(model.state_dict(), "gpt3-headless", converted.model_keys, tmp_path / "e")
    names = set(_tensors(exported))
    assert "wte.weight" in names
    assert not [n for n in names if n.startswith(("lm_head", "transformer."))]
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["GPT2Model"]
    torch.testing.assert_close(hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=RTOL)


def test_gpt2_headless_untied_import_draws_the_head_from_n_0_002(tmp_path: Path) -> None:
    config = {**GPT2, "tie_word_embeddings": False}
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **config)
    converted = hf_to_plugtrain(save_hf(hf.transformer, tmp_path / "base"))
    head = converted.state["model.lm_head.weight"]
    embedding = converted.state["model.embedding_layer.word_embeddings.weight"]
    assert head.shape == embedding.shape
    assert not torch.equal(head, embedding)
    # 8192 draws: the std's standard error is 0.8 %, the mean's 0.00022; both bounds are > 6 of it
    assert float(head.std()) == pytest.approx(0.02, rel=0.05)
    assert abs(float(head.mean())) < 0.002


# --------------------------------------------------------------------- muP folded on export

MUP_CASES = {
    # pre-2.3 muP: scales given directly (the keys of test_models_hf's folded gpt3 test)
    "gpt3-scales": ("gpt3", {
        "embeddings_scale": 10.0, "scale_qk_dot_by_d": True, "attention_logits_alpha": 2.0,
        "output_logits_scale": 0.25,
    }),
    # muP with base widths: logits * alpha / (H / base), q.k / d by default
    "gpt3-base-widths": ("gpt3", {
        "embeddings_scale": 10.0, "mup_base_hidden_size": 32, "mup_base_filter_size": 48,
        "output_logits_alpha": 3.0, "attention_logits_alpha": 0.5, "share_embedding_weights": False,
    }),
    "starcoder-multi-query-scales": ("starcoder", {
        "embeddings_scale": 4.0, "scale_qk_dot_by_d": True, "output_logits_scale": 0.5,
        "attention_module": "multiquery_attention", "extra_attention_params": {"num_kv_groups": 1},
    }),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MUP_CASES))
def test_a_mup_model_exported_gives_its_logits_in_transformers(case: str, tmp_path: Path) -> None:
    family, keys = MUP_CASES[case]
    model = _random_plugtrain(family, **keys)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    exported = export_hf(model.state_dict(), family, {**SHARED_KEYS, **keys}, tmp_path / case)
    tokens = ids(V)
    ours = _logits(model, tokens)
    torch.testing.assert_close(hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=RTOL)
    _assert_bit_equal(before, model.state_dict())  # folding works on copies
    config = json.loads((exported / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    converted = hf_to_plugtrain(exported)  # standard parametrisation: the same function
    torch.testing.assert_close(
        _logits(_build(converted), tokens), ours, atol=LOGITS_ATOL, rtol=RTOL
    )


# ----------------------------------------------------------------------------- JAIS and BTLM


def _alibi_hf_logits(folder: Path, tokens: torch.Tensor) -> torch.Tensor:
    """JAIS's and BTLM's forward (their Hub modeling code, transcribed) on a folder's files."""
    config = json.loads((folder / "config.json").read_text())
    w = _tensors(folder)
    t = "transformer."
    heads, width, eps = config["n_head"], config["n_embd"], config["layer_norm_epsilon"]
    batch, length = tokens.shape
    x = w[t + "wte.weight"][tokens]
    alibi = config["position_embedding_type"] == "alibi"
    if not alibi:
        x = x + w[t + "wpe.weight"][:length]
    x = x * config["mup_embeddings_scale"]
    power = 1.0 if config["mup_scale_qk_dot_by_d"] else 0.5
    scale = (width // heads) ** -power if config["scale_attn_weights"] else 1.0
    bias = torch.zeros(heads, length, length)
    if alibi:
        positions = torch.arange(length)
        distance = (positions.view(1, -1) - positions.view(-1, 1)).abs()
        factor = (config.get("alibi_scaling") or {}).get("factor", 1.0)
        bias = -w[t + "relative_pe.slopes"].view(heads, 1, 1) * distance / factor
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    bias = bias.masked_fill(~causal, float("-inf"))

    def conv1d(name: str, h: torch.Tensor) -> torch.Tensor:  # Conv1D: x W + b, W [in, out]
        return h @ w[name + ".weight"] + w[name + ".bias"]

    def norm(name: str, h: torch.Tensor) -> torch.Tensor:
        return functional.layer_norm(h, (width,), w[name + ".weight"], w[name + ".bias"], eps)

    for layer in range(config["n_layer"]):
        h = f"{t}h.{layer}."
        q, k, v = conv1d(h + "attn.c_attn", norm(h + "ln_1", x)).split(width, dim=-1)
        q, k, v = (p.view(batch, length, heads, -1).transpose(1, 2) for p in (q, k, v))
        scores = q @ k.transpose(-1, -2) * scale
        if config["scale_attn_by_inverse_layer_idx"]:
            scores = scores / (layer + 1)
        attended = torch.softmax(scores + bias, dim=-1) @ v
        x = x + conv1d(h + "attn.c_proj", attended.transpose(1, 2).reshape(batch, length, width))
        normed = norm(h + "ln_2", x)
        if config["activation_function"] == "swiglu":
            inner = conv1d(h + "mlp.c_fc", normed) * functional.silu(
                conv1d(h + "mlp.c_fc2", normed)
            )
        else:
            assert config["activation_function"] == "gelu_new"
            inner = functional.gelu(conv1d(h + "mlp.c_fc", normed), approximate="tanh")
        x = x + conv1d(h + "mlp.c_proj", inner)
    x = norm(t + "ln_f", x)
    head = w[t + "wte.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T * (config["mup_output_alpha"] * config["mup_width_scale"])


def _slopes(heads: int) -> torch.Tensor:
    """ALiBi's slopes for a power-of-two head count, ``[heads, 1]``, as the Hub code makes them."""
    return torch.tensor([2 ** (-8 * (j + 1) / heads) for j in range(heads)]).unsqueeze(1)


def _alibi_hf_folder(folder: Path, config: dict[str, Any]) -> Path:
    """A JAIS or BTLM folder as ``save_pretrained`` writes it: ``config.json``, safetensors."""
    generator = torch.Generator().manual_seed(0)

    def normal(*shape: int, plus: float = 0.0) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * 0.2 + plus

    t = "transformer."
    w = {
        t + "wte.weight": normal(V, H),
        t + "ln_f.weight": normal(H, plus=1),
        t + "ln_f.bias": normal(H),
    }
    if config["position_embedding_type"] == "alibi":
        w[t + "relative_pe.slopes"] = _slopes(NH)
    else:
        w[t + "wpe.weight"] = normal(P, H)
    conv1d = {
        "attn.c_attn": (H, 3 * H),
        "attn.c_proj": (H, H),
        "mlp.c_fc": (H, F),
        "mlp.c_proj": (F, H),
    }
    if config["activation_function"] == "swiglu":
        conv1d["mlp.c_fc2"] = (H, F)
    for layer in range(L):
        h = f"{t}h.{layer}."
        for name in ("ln_1", "ln_2"):
            w[f"{h}{name}.weight"], w[f"{h}{name}.bias"] = normal(H, plus=1), normal(H)
        for name, (rows, columns) in conv1d.items():
            w[f"{h}{name}.weight"], w[f"{h}{name}.bias"] = normal(rows, columns), normal(columns)
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = normal(V, H)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    safetensors_torch.save_file(w, folder / "model.safetensors")
    return folder


def _alibi_config(model_type: str, **changes: Any) -> dict[str, Any]:
    """A ``config.json`` as the Hub's JAIS / BTLM config classes write it (muP, ALiBi, SwiGLU)."""
    name = {"jais": "JAIS", "btlm": "BTLM"}[model_type]
    return {
        "architectures": [f"{name}LMHeadModel"], "model_type": model_type,
        "auto_map": {"AutoConfig": f"configuration_{model_type}.{name}Config"},
        "vocab_size": V, "n_embd": H, "n_layer": L, "n_head": NH, "n_positions": P, "n_inner": F,
        "activation_function": "swiglu", "position_embedding_type": "alibi",
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "mup_width_scale": 0.5, "mup_embeddings_scale": 10.0, "mup_output_alpha": 3.0,
        "mup_scale_qk_dot_by_d": True, "alibi_scaling": None, "tie_word_embeddings": True,
        "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32",
        **changes,
    }  # fmt: skip


ALIBI_FOLDERS = {
    "jais-mup-alibi-swiglu": _alibi_config("jais"),
    "btlm-scaled-alibi-untied": _alibi_config(
        "btlm", alibi_scaling={"type": "linear", "factor": 2.0}, tie_word_embeddings=False
    ),
    "jais-learned-gelu-unscaled-scores": _alibi_config(
        "jais", position_embedding_type="learned", activation_function="gelu_new",
        mup_width_scale=1.0, mup_embeddings_scale=1.0, mup_output_alpha=1.0,
        mup_scale_qk_dot_by_d=True, scale_attn_weights=False, scale_attn_by_inverse_layer_idx=True,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ALIBI_FOLDERS))
def test_a_jais_or_btlm_folder_converts_both_ways_with_its_forward(
    case: str, tmp_path: Path
) -> None:
    config = ALIBI_FOLDERS[case]
    folder = _alibi_hf_folder(tmp_path / case, config)
    tokens = ids(V)
    reference = _alibi_hf_logits(folder, tokens)
    converted = hf_to_plugtrain(folder)
    assert converted.converter == config["model_type"]
    model = _build(converted)
    ours = _logits(model, tokens)
    torch.testing.assert_close(ours, reference, atol=LOGITS_ATOL, rtol=RTOL)
    exported = export_hf(
        model.state_dict(), converted.converter, converted.model_keys, tmp_path / "e"
    )
    assert set(_tensors(exported)) == set(_tensors(folder))
    _assert_bit_equal(_tensors(folder), _tensors(exported))
    torch.testing.assert_close(
        _alibi_hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=RTOL
    )
    again = hf_to_plugtrain(exported)
    assert again.model_keys == converted.model_keys
    _assert_bit_equal(model.state_dict(), again.state)


@pytest.mark.parametrize("family", ["jais", "btlm"])
def test_a_plugtrain_mup_jais_or_btlm_exports_to_its_forward(family: str, tmp_path: Path) -> None:
    # the keys of test_models_reference's muP test: muP lives on in mup_* config keys
    keys = {
        "position_embedding_type": "alibi", "nonlinearity": "swiglu", "embeddings_scale": 10.0,
        "mup_base_hidden_size": 32, "mup_base_filter_size": 48, "output_logits_alpha": 3.0,
    }  # fmt: skip
    model = _random_plugtrain(family, **keys)
    exported = export_hf(model.state_dict(), family, {**SHARED_KEYS, **keys}, tmp_path / family)
    config = json.loads((exported / "config.json").read_text())
    assert (config["mup_width_scale"], config["mup_output_alpha"]) == (0.5, 3.0)
    tokens = ids(V)
    ours = _logits(model, tokens)
    torch.testing.assert_close(
        _alibi_hf_logits(exported, tokens), ours, atol=LOGITS_ATOL, rtol=RTOL
    )
    again = hf_to_plugtrain(exported)
    assert {k: again.model_keys[k] for k in keys} == keys
    _assert_bit_equal(model.state_dict(), again.state)


# ------------------------------------------------------------------- errors and registration


def test_gpt_bigcode_refuses_grouped_query_attention_naming_the_key() -> None:
    registry = get_registry()
    _, converter = find_converter(registry, "starcoder", None)
    grouped = {
        "attention_module": "multiquery_attention",
        "extra_attention_params": {"num_kv_groups": 2},
    }
    keys = complete_model_keys(registry, "starcoder", {**SHARED_KEYS, **grouped})
    defaults = model_defaults(registry, "starcoder")
    with pytest.raises(ConversionError, match=r"num_kv_groups = 2"):
        plugtrain_to_hf_config(converter, keys, defaults, converter.plugtrain_handled)


def test_dynamic_alibi_scaling_is_refused_naming_the_key() -> None:
    _, converter = find_converter(get_registry(), "btlm", None)
    dynamic = _alibi_config("btlm", alibi_scaling={"type": "linear", "train_seq_len": 8192})
    with pytest.raises(ConversionError, match=r"alibi_scaling"):
        hf_to_plugtrain_config(converter, dynamic)


def test_gpt2_refuses_a_model_key_it_cannot_express_naming_it() -> None:
    registry = get_registry()
    _, converter = find_converter(registry, "gpt3", None)
    keys = complete_model_keys(registry, "gpt3", {**SHARED_KEYS, "attention_inner_dim": 128})
    defaults = model_defaults(registry, "gpt3")
    with pytest.raises(ConversionError, match=r"model\.attention_inner_dim = 128"):
        plugtrain_to_hf_config(converter, keys, defaults, converter.plugtrain_handled)


def test_the_keys_and_model_zoos_aliases_are_registered_without_torch() -> None:
    aliases = {
        "gpt3": "gpt2", "gpt3-headless": "gpt2-headless", "octocoder": "starcoder",
        "wizardcoder": "starcoder", "sqlcoder": "starcoder",
        "sqlcoder-headless": "starcoder-headless",
    }  # fmt: skip
    keys = ["gpt2", "starcoder", "santacoder", "jais", "btlm"]
    script = (
        "import sys\n"
        "from plugtrain.discovery.loading import get_registry\n"
        "from plugtrain.conversion import CheckpointConverter\n"
        "registry = get_registry()\n"
        f"families = {keys!r}\n"
        "names = registry.names('checkpoint_converter')\n"
        "mine = [k for k in names if k.split('-')[0] in families]\n"
        "assert all(isinstance(registry.resolve('checkpoint_converter', k), CheckpointConverter)"
        " for k in mine)\n"
        "print(mine)\n"
        f"aliases = {list(aliases)!r}\n"
        "print({a: registry.lookup('checkpoint_converter', a).name for a in aliases})\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    listed, resolved, imported_torch = result.stdout.strip().splitlines()
    assert listed == repr(sorted([*keys, *(f"{k}-headless" for k in keys)]))
    assert resolved == repr(aliases)
    assert imported_torch == "False"
