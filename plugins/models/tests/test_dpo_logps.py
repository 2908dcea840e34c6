"""DPO's per-sequence log-probs equal transformers' for every decoder family's converter path.

For each family a tiny random Hugging Face model is saved as a folder and loaded into a
``dpo`` model the way ``fit.ckpt_path`` loads it (``hf_checkpoint_state``, which opens it with
``plugtrain.conversion.open_checkpoint``): the one folder fills the policy and the reference.
Both then give, for every chosen and rejected row, the sum over the response of
``logits.log_softmax(-1)`` gathered on the next tokens, as transformers' logits give it. JAIS
and BTLM have no transformers class: their reference forward is the converter tests' own
transcription of the Hub code.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

import importlib.util

from support.hf_models import hf_logits, random_hf_model, save_hf

from plugtrain.conversion import hf_to_plugtrain
from plugtrain.discovery.loading import get_registry
from plugtrain.train.checkpointing.state.foreign import hf_checkpoint_state
from plugtrain_models.dpo.model import DpoModel, dpo


def _sibling(name: str) -> Any:
    """A converter test module of this folder, for its tiny configurations."""
    spec = importlib.util.spec_from_file_location(f"_dpo_{name}", Path(__file__).with_name(name))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GPT2_TESTS = _sibling("test_converters_gpt2.py")
GPTJ_CASES = _sibling("test_converters_gptj.py").CASES
LLAMA_CASES = _sibling("test_converters_llama.py").CASES
V, B, S = 128, 3, 20
ATOL = 2e-4  # float32 sums of ~15 log-probs, each within the logits' 1e-4


def _cases() -> dict[str, tuple[str, Any]]:
    """One folder maker per family: name -> (family, how to build the folder)."""
    cases: dict[str, tuple[str, Any]] = {}
    for name in ("llama-llama3-rope", "mistral-window", "mixtral", "gemma2"):
        cases[name] = ("hf", LLAMA_CASES[name])
    for name in ("gptj", "gpt-neox-half-rotary-theta-5000", "falcon-40b-new-architecture", "bloom"):
        cases[name] = ("hf", GPTJ_CASES[name])
    gpt2 = (
        transformers.GPT2Config,
        transformers.GPT2LMHeadModel,
        GPT2_TESTS.GPT2_CASES["gpt2-default-gelu-new-tied"],
    )
    cases["gpt2"] = ("hf", gpt2)
    bigcode = (transformers.GPTBigCodeConfig, transformers.GPTBigCodeForCausalLM)
    for name in ("starcoder-multi-query", "santacoder-untied"):
        cases[name] = ("hf", (*bigcode, GPT2_TESTS.BIGCODE_CASES[name][2]))
    for name in ("jais-mup-alibi-swiglu", "btlm-scaled-alibi-untied"):
        cases[name] = ("alibi", GPT2_TESTS.ALIBI_FOLDERS[name])
    return cases


CASES = _cases()


def _folder(case: str, tmp_path: Path) -> tuple[Path, Any]:
    """The saved folder and a function giving its reference logits."""
    kind, spec = CASES[case]
    if kind == "alibi":
        folder = GPT2_TESTS._alibi_hf_folder(tmp_path / case, spec)
        return folder, lambda tokens: GPT2_TESTS._alibi_hf_logits(folder, tokens)
    config_class, model_class, config = spec
    hf = random_hf_model(config_class, model_class, **config)
    folder = save_hf(hf, tmp_path / case)
    return folder, lambda tokens: hf_logits(hf, tokens)


def _batch() -> dict[str, torch.Tensor]:
    """Chosen and rejected rows sharing a prompt; masks on the responses, then padding."""
    g = torch.Generator().manual_seed(2)
    batch: dict[str, torch.Tensor] = {}
    prompt = torch.randint(0, V, (B, 6), generator=g)
    for side, length in (("chosen", 9), ("rejected", 13)):
        tokens = torch.zeros(B, S + 1, dtype=torch.long)
        tokens[:, :6] = prompt
        tokens[:, 6 : 6 + length] = torch.randint(0, V, (B, length), generator=g)
        mask = torch.zeros(B, S, dtype=torch.int32)
        mask[:, 5 : 5 + length] = 1  # labels[5] is the response's first token
        mask[0, 5 + length - 2 :] = 0  # a shorter response in row 0
        batch[f"{side}_input_ids"] = tokens[:, :-1]
        batch[f"{side}_labels"] = tokens[:, 1:]
        batch[f"{side}_attention_mask"] = mask
    return batch


def _expected(logits_of: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[B, 2]``: transformers' log_softmax gathered on the labels, summed over the mask."""
    columns = []
    for side in ("chosen", "rejected"):
        logits = logits_of(batch[f"{side}_input_ids"]).double()
        picked = logits.log_softmax(-1).gather(-1, batch[f"{side}_labels"][..., None])[..., 0]
        columns.append((picked * batch[f"{side}_attention_mask"]).sum(-1))
    return torch.stack(columns, dim=1).float()


@pytest.mark.parametrize("case", list(CASES))
def test_policy_and_reference_log_probs_equal_transformers(case: str, tmp_path: Path) -> None:
    folder, logits_of = _folder(case, tmp_path)
    converted = hf_to_plugtrain(folder)
    policy = {"name": converted.model_name, **converted.model_keys}
    torch.manual_seed(0)
    model = dpo(policy_model=policy, dpo={"beta": 0.1}).eval()
    assert isinstance(model, DpoModel)
    assert model.checkpoint_converter == converted.model_name
    state = hf_checkpoint_state(model, folder, get_registry())
    model.load_state_dict(state["model"])
    batch = _batch()
    expected = _expected(logits_of, batch)
    assert model.reference is not None
    with torch.no_grad():
        for network in (model.policy_model, model.reference):
            sums, counts = model.pair_logps(batch, network)
            torch.testing.assert_close(sums, expected, atol=ATOL, rtol=1e-5)
        assert counts.tolist() == [[7, 11]] + [[9, 13]] * (B - 1)
        out = model(batch)
    # the reference is the policy: every implicit reward is 0, the sigmoid loss log 2
    assert out["loss"].item() == pytest.approx(torch.log(torch.tensor(2.0)).item(), abs=1e-6)
    assert out["chosen_rewards"].item() == 0.0
