"""The built-in plugin distributions as users get them: installed, found through entry points.

Each test skips with a reason when its distribution is not installed (CI installs the core with
one plugin at a time), and "core alone" is simulated with ``PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import plugtrain
from plugtrain.registry import Registry
from plugtrain.registry.kinds import KINDS
from plugtrain.testing import assert_plugin_contract, assert_plugin_installed

# (distribution, import package, kind, one name it registers)
BUILT_IN = [
    pytest.param(
        "plugtrain-optimizers", "plugtrain_optimizers", "optimizer", "SGD", id="optimizers"
    ),
    pytest.param(
        "plugtrain-schedulers", "plugtrain_schedulers", "scheduler", "LinearLR", id="schedulers"
    ),
    pytest.param("plugtrain-backends", "plugtrain_backends", "backend", "CPU", id="backends"),
    pytest.param(
        "plugtrain-callbacks", "plugtrain_callbacks", "callback", "ComputeNorm", id="callbacks"
    ),
    pytest.param("plugtrain-sparsity", "plugtrain_sparsity", "sparsity", "RigL", id="sparsity"),
    pytest.param("plugtrain-models", "plugtrain_models", "model", "gpt3", id="models"),
]
# Model Zoo's default sizes (gpt3: 124 M parameters) would make the contract's round trip slow.
_TINY_DECODER = {
    "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 1, "num_heads": 2,
    "filter_size": 32, "max_position_embeddings": 16,
}  # fmt: skip
_TINY_BERT = {
    "vocab_size": 40, "hidden_size": 16, "num_heads": 2, "num_hidden_layers": 1,
    "filter_size": 32, "max_position_embeddings": 24,
}  # fmt: skip
_TINY_T5 = {
    "src_vocab_size": 40, "d_model": 16, "d_kv": 8, "num_heads": 2, "d_ff": 32,
    "encoder_num_hidden_layers": 1, "decoder_num_hidden_layers": 1,
}  # fmt: skip
CONTRACT_ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "plugtrain-models": {
        **dict.fromkeys(
            ("bloom", "btlm", "falcon", "gemma2", "gpt-neox", "gpt2", "gpt3", "gptj", "jais",
             "llama", "mistral", "mixtral", "santacoder", "starcoder"),
            _TINY_DECODER,
        ),
        "GPT": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16},
        **dict.fromkeys(("bert", "bert/extractive_summarization"), _TINY_BERT),
        "bert/classifier": {**_TINY_BERT, "num_labels": 2, "problem_type": "regression",
                            "task_dropout": 0.0},
        "bert/token_classifier": {**_TINY_BERT, "num_classes": 3,
                                  "encoder_output_dropout_rate": 0.0},
        "esm2": {**_TINY_BERT, "position_embedding_type": "rotary", "rotary_dim": 8},
        "dpr": {"q_encoder": _TINY_BERT, "ctx_encoder": _TINY_BERT},
        **dict.fromkeys(("t5", "T5ForConditionalGeneration", "transformer"), _TINY_T5),
        "dpo": {"policy_model": {"name": "llama", **_TINY_DECODER}, "dpo": {"beta": 0.1}},
    },
}  # fmt: skip
"""``arguments`` of the plugin contract's round trip, per distribution."""
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


def _require(distribution: str) -> str:
    """The installed version of ``distribution``; skips the test when it is absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")


def _python(
    code: str, tmp_path: Path, *arguments: str, **environment: str
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, outside the repository, without plugtrain switches."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    env.update(environment)
    return subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=tmp_path,
        timeout=HANG_LIMIT_S,
    )


@pytest.fixture(scope="module")
def plugins_listing(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``plugtrain plugins --json`` as a fresh process prints it."""
    code = "import sys; from plugtrain.cli import main; sys.exit(main(['plugins', '--json']))"
    done = _python(code, tmp_path_factory.mktemp("plugins"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("distribution", "package", "kind", "name"), BUILT_IN)
def test_distribution_is_installed_and_loaded(
    distribution: str, package: str, kind: str, name: str, installed_registry: Registry
) -> None:
    _require(distribution)
    assert_plugin_installed(distribution, installed_registry)


@pytest.mark.parametrize(("distribution", "package", "kind", "name"), BUILT_IN)
def test_plugins_command_lists_the_distribution(
    distribution: str,
    package: str,
    kind: str,
    name: str,
    plugins_listing: list[dict[str, Any]],
) -> None:
    version = _require(distribution)
    # a distribution may hold several plugins (plugtrain-models: models and gpt_data)
    rows = [
        row
        for row in plugins_listing
        if row["distribution"] == distribution and row["module"] == f"{package}.plugin"
    ]
    assert len(rows) == 1, plugins_listing
    row = rows[0]
    assert row["version"] == version
    assert row["status"] == "loaded"
    assert row["module"] == f"{package}.plugin"
    assert KINDS[kind].hook in row["hooks"]
    assert name in row["components"][kind]


@pytest.mark.parametrize(("distribution", "package", "kind", "name"), BUILT_IN)
def test_name_resolves_to_the_distributions_implementation(
    distribution: str, package: str, kind: str, name: str
) -> None:
    version = _require(distribution)
    implementation = plugtrain.resolve(kind, name)
    assert implementation.__module__.split(".")[0] == package
    info = plugtrain.describe(kind, name)
    assert (info.distribution, info.version) == (distribution, version)
    assert name in plugtrain.names(kind)


CONTRACT_CASES = [
    pytest.param(*case.values, marks=pytest.mark.slow, id=case.id) if case.id == "models" else case
    for case in BUILT_IN
]
"""The distributions whose contract is checked; plugtrain-models' (every model family built and
round-tripped) is in the slow lane, its own tests check its contract in the fast one."""


@pytest.mark.parametrize(("distribution", "package", "kind", "name"), CONTRACT_CASES)
@pytest.mark.filterwarnings("ignore:Passing 'T5ForConditionalGeneration':FutureWarning")
def test_distribution_passes_the_plugin_contract(
    distribution: str, package: str, kind: str, name: str, installed_registry: Registry
) -> None:
    """Every component resolves, imports and matches its schema; plugin modules skip torch."""
    _require(distribution)
    arguments = CONTRACT_ARGUMENTS.get(distribution)
    assert_plugin_contract(distribution, installed_registry, arguments=arguments)


CORE_ALONE = """
import json, sys
import plugtrain

try:
    plugtrain.resolve(sys.argv[1], sys.argv[2])
except plugtrain.UnknownNameError as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"type": None, "message": ""}))
"""


@pytest.mark.parametrize(("distribution", "package", "kind", "name"), BUILT_IN)
def test_core_alone_says_which_distribution_to_install(
    distribution: str, package: str, kind: str, name: str, tmp_path: Path
) -> None:
    """With no plugin loaded, asking for a built-in name names the distribution providing it."""
    done = _python(CORE_ALONE, tmp_path, kind, name, PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["type"] == "UnknownNameError"
    message = result["message"]
    assert message.startswith(f"Unknown {kind} '{name}'.")
    # a kind the core also provides (models) names the distribution shipping the name
    assert f"no installed plugin provides {KINDS[kind].plural}" in message.lower() or (
        f"'{name}' is a {kind} of {distribution}, which is not installed" in message
    ), message
    assert f"pip install {distribution}" in message
