"""The bridges: other libraries' optimizers by name, without changing what existing names mean."""

from __future__ import annotations

import importlib.metadata
import inspect
import math
import subprocess
import sys
import textwrap

import pytest
import torch

import plugtrain
from plugtrain.config import check_run, load_yaml
from plugtrain.errors import ConfigError, UnknownNameError
from plugtrain_bridges import generate, pytorch_optimizer_plugin, table, torch_plugin
from plugtrain_bridges.libraries import Library

pytest.importorskip("pytorch_optimizer", reason="pytorch-optimizer is not installed")

BRIDGES = ("torch", "pytorch-optimizer")


def _bridged(registry):
    return [c for c in registry.components("optimizer") if c.plugin.name in BRIDGES]


def test_the_generated_table_equals_the_installed_libraries():
    current = {"VERSIONS": table.VERSIONS, "OPTIMIZERS": table.OPTIMIZERS}
    assert generate.render_table(current) == generate.TABLE.read_text(encoding="utf-8")
    assert table.VERSIONS["torch"] == torch.__version__
    assert table.VERSIONS["pytorch-optimizer"] == importlib.metadata.version("pytorch-optimizer")


def test_every_library_optimizer_is_bridged_unless_it_cannot_be_written_in_a_run_file():
    import pytorch_optimizer

    assert {"ADOPT", "Prodigy", "Lamb", "Lion", "SOAP"} <= set(
        table.OPTIMIZERS["pytorch-optimizer"]
    )
    assert {"Adam", "AdamW", "Adamax", "SGD", "SparseAdam"} <= set(table.OPTIMIZERS["torch"])
    assert "LBFGS" not in table.OPTIMIZERS["torch"]  # its step needs a closure
    assert "LOMO" not in table.OPTIMIZERS["pytorch-optimizer"]  # built on a model, not params
    assert (
        len(table.OPTIMIZERS["pytorch-optimizer"])
        >= len(pytorch_optimizer.get_supported_optimizers()) * 0.8
    )


def test_bridged_names_resolve_and_a_name_another_plugin_has_stays_that_plugins(installed_registry):
    pytest.importorskip("plugtrain_optimizers", reason="plugtrain-optimizers is not installed")
    import pytorch_optimizer

    assert installed_registry.resolve("optimizer", "ADOPT") is pytorch_optimizer.ADOPT
    assert installed_registry.resolve("optimizer", "Prodigy") is pytorch_optimizer.Prodigy
    assert installed_registry.resolve("optimizer", "pytorch-optimizer:Lamb") is (
        pytorch_optimizer.Lamb
    )
    assert installed_registry.resolve("optimizer", "torch:Adamax") is torch.optim.Adamax
    for name in ("Lamb", "lamb", "Adamax", "AdaMax", "AdamW", "SGD", "Muon"):
        assert installed_registry.lookup("optimizer", name).plugin.distribution == (
            "plugtrain-optimizers"
        ), name


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("ADOPT", {"lr": 0.01}),
        ("Prodigy", {"lr": 1.0, "betas": [0.9, 0.99]}),
        ("pytorch-optimizer:Lamb", {"lr": 0.01, "weight_decay": 0.01}),
        ("torch:Adamax", {"lr": 0.01}),
    ],
)
def test_a_bridged_optimizer_builds_from_a_run_file_mapping_and_steps(name, arguments):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    built = plugtrain.build_optimization(model, {"optimizer": {name: arguments}})
    implementation = plugtrain.resolve("optimizer", name)
    assert type(built.optimizer) is implementation
    before = [p.detach().clone() for p in model.parameters()]
    inputs, targets = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(3):
        built.optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(inputs), targets).backward()
        built.optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_every_bridged_schema_describes_and_matches_its_constructor(installed_registry):
    bridged = _bridged(installed_registry)
    assert len(bridged) == sum(len(rows) for rows in table.OPTIMIZERS.values())
    for component in bridged:
        info = component.describe()
        parameters = inspect.signature(component.load()).parameters
        for argument in info.arguments:
            parameter = parameters[argument.name]
            assert argument.required == (parameter.default is parameter.empty), component.name
            if not argument.required:
                assert _same(argument.default, parameter.default), (component.name, argument.name)


def _same(a, b):
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


RUN = """\
trainer:
  init:
    device: CPU
    model: {MLP: {in_features: 4, out_features: 2}}
    optimizer:
      ADOPT:
        lr: fast
        weight_decouple: 3
    loop: {max_steps: 2}
  fit:
    train_dataloader: {Synthetic: {batch_size: 8, in_features: 4, num_classes: 2}}
"""


def test_check_validates_bridged_arguments_with_positions():
    with pytest.raises(ConfigError) as raised:
        check_run(load_yaml(RUN, "run.yaml"), plugtrain.get_registry())
    found = {issue.path: issue.location for issue in raised.value.issues}
    assert found == {
        "trainer.init.optimizer.ADOPT.lr": "run.yaml:7:13",
        "trainer.init.optimizer.ADOPT.weight_decouple": "run.yaml:8:26",
    }


def test_listing_describing_and_checking_import_no_torch():
    code = textwrap.dedent(
        f"""
        import sys
        import plugtrain
        from plugtrain.config import check_run, load_yaml

        registry = plugtrain.get_registry()
        names = registry.names("optimizer")
        assert "ADOPT" in names and "SparseAdam" in names, names
        for component in registry.components("optimizer"):
            component.describe()
        try:
            check_run(load_yaml({RUN!r}, "run.yaml"), registry)
        except plugtrain.ConfigError:
            pass
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_name_of_a_library_that_is_not_installed_says_what_to_install(make_registry, monkeypatch):
    monkeypatch.setattr(Library, "installed", lambda self: self.name != "pytorch-optimizer")
    registry = make_registry(torch_plugin, pytorch_optimizer_plugin)
    assert registry.lookup("optimizer", "Adamax").plugin.name.endswith("torch_plugin")
    with pytest.raises(UnknownNameError) as raised:
        registry.lookup("optimizer", "ADOPT")
    assert (
        "'ADOPT' is an optimizer of pytorch-optimizer, which is not installed "
        "(pip install pytorch-optimizer)"
    ) in str(raised.value)


def test_the_json_schema_resolves_names_as_the_registry_does(installed_registry):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("plugtrain_optimizers", reason="plugtrain-optimizers is not installed")
    from plugtrain.authoring.jsonschema import run_file_schema

    schema = run_file_schema(installed_registry)
    optimizer = schema["$defs"]["optimizer"]
    assert optimizer["properties"]["Lamb"] == {"$ref": "#/$defs/optimizer.Lamb"}
    assert optimizer["properties"]["ADOPT"] == {
        "$ref": "#/$defs/optimizer.ADOPT (pytorch-optimizer)"
    }
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/$defs/optimizer", "$defs": schema["$defs"]}
    )

    def errors(value):
        return [e.message for e in validator.iter_errors(value)]

    assert errors({"pytorch-optimizer:Lamb": {"lr": 0.1, "rectify": True}}) == []
    assert errors({"torch:Adamax": {"lr": 0.1}}) == []
    assert errors({"adopt": {"weight_decouple": True}}) == []
    assert errors({"Lamb": {"rectify": True}})  # plugtrain's Lamb has no rectify
    assert errors({"ADOPT": {"lr": "fast"}})


def test_a_distribution_lists_its_own_names_beside_the_bridges():
    from plugtrain.testing import distribution_names

    pytest.importorskip("plugtrain_optimizers", reason="plugtrain-optimizers is not installed")
    own = distribution_names("plugtrain-optimizers", "optimizer")
    assert "Lamb" in own
    assert "ADOPT" not in own
    assert "ADOPT" in plugtrain.names("optimizer")
    assert set(distribution_names("plugtrain-bridges", "optimizer")) == {
        name for rows in table.OPTIMIZERS.values() for name in rows
    }
