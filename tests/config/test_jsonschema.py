"""``plugtrain schema``: a JSON Schema of run files that agrees with ``plugtrain check``.

Every example run file must validate; each known-bad variant must fail both the JSON Schema and
``check_run``, and each accepted variant must pass both, so the schema cannot drift from the
validator without a test noticing.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
import yaml
from support.paths import REPO

import plugtrain
from plugtrain.authoring.jsonschema import DRAFT, run_file_schema, type_schema
from plugtrain.cli import main
from plugtrain.config import check_run
from plugtrain.config.reading.yaml_loader import load_yaml
from plugtrain.errors import ConfigError
from plugtrain.schema import arg

jsonschema = pytest.importorskip("jsonschema")

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
QUICKSTART = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8"))
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 300


@pytest.fixture(scope="module")
def registry() -> plugtrain.Registry:
    from plugtrain.discovery.loading import PluginSettings, build_registry

    found = build_registry(PluginSettings.from_env())
    for kind, name in (("optimizer", "SGD"), ("scheduler", "LinearLR"), ("backend", "CPU")):
        if name not in found.names(kind):
            pytest.skip(f"the built-in {kind}s are not installed")
    return found


@pytest.fixture(scope="module")
def validator(registry: plugtrain.Registry) -> Any:
    schema = run_file_schema(registry)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(validator: Any, data: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


def check_errors(registry: plugtrain.Registry, data: Any) -> list[str]:
    try:
        check_run(data, registry)
    except ConfigError as exc:
        return [str(issue) for issue in exc.issues]
    return []


def test_the_schema_is_draft_2020_12_and_closed(registry):
    schema = run_file_schema(registry)
    assert schema["$schema"] == DRAFT == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    for key, definition in schema["$defs"].items():
        if definition.get("type") in ("object", ["object", "null"]) and "properties" in definition:
            assert definition["additionalProperties"] is False, key


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_run_file_validates(path, validator, registry, example_cwd):
    example_cwd(path)  # the data the Model Zoo-shaped examples read must exist
    # read as plugtrain and YAML 1.2 editors read it: 6e-04 is a float (YAML 1.1 says a string)
    data = load_yaml(path.read_text(encoding="utf-8"), str(path))
    assert check_errors(registry, data) == []
    assert schema_errors(validator, data) == []


def _init(data: dict[str, Any]) -> dict[str, Any]:
    return data["trainer"]["init"]  # type: ignore[no-any-return]


def _sgd(data: dict[str, Any]) -> dict[str, Any]:
    return _init(data)["optimizer"]["SGD"]  # type: ignore[no-any-return]


Mutation = Callable[[dict[str, Any]], Any]

BAD: dict[str, Mutation] = {
    "unknown top-level key": lambda d: d.update(trainr={}),
    "unknown section key": lambda d: _init(d).update(devise="CPU"),
    "unknown optimizer": lambda d: _init(d).update(optimizer={"SDG": {"lr": 0.1}}),
    "unknown argument": lambda d: _sgd(d).update(momentun=0.9),
    "negative learning rate": lambda d: _sgd(d).update(lr=-1),
    "string for a number": lambda d: _sgd(d).update(momentum="high"),
    "missing required argument": lambda d: _init(d).update(model={"MLP": {"in_features": 64}}),
    "two components in one mapping": lambda d: _init(d).update(
        optimizer={"SGD": {"lr": 0.1}, "Adam": {"lr": 0.1}}
    ),
    "component written as a string": lambda d: _init(d).update(optimizer="SGD"),
    "argument and its alias": lambda d: _sgd(d).update(learning_rate=0.1),
    "device and backend": lambda d: _init(d).update(backend={"backend_type": "CPU"}),
    "unknown device": lambda d: _init(d).update(device="TPU"),
    "backend without type": lambda d: (_init(d).pop("device"), _init(d).update(backend={})),
    "backend argument of another backend": lambda d: (
        _init(d).pop("device"),
        _init(d).update(backend={"backend_type": "CPU", "bogus": 1}),
    ),
    "loop without a stopping rule": lambda d: _init(d).update(loop={"eval_frequency": 10}),
    "checkpoint name without step": lambda d: _init(d).update(
        checkpoint={"checkpoint_name": "last.mdl"}
    ),
    "log level not a choice": lambda d: _init(d).update(
        logging={"log_steps": 1, "log_level": "LOUD"}
    ),
    "logging without log_steps": lambda d: _init(d).update(logging={}),
    "fit without optimizer": lambda d: _init(d).pop("optimizer"),
    "fit without loop": lambda d: _init(d).pop("loop"),
    "trainer with nothing to do": lambda d: d["trainer"].pop("fit"),
    "empty trainer list": lambda d: d.update(trainer=[]),
    "trainer list item with extra key": lambda d: d.update(
        trainer=[{"trainer": d["trainer"], "extra": 1}]
    ),
    "tagging filter without tag": lambda d: _sgd(d).update(params=[{"params": "*bias"}]),
    "tagging filter with unknown key": lambda d: _sgd(d).update(
        params=[{"params": "*bias", "tag": "b", "lr": 1}]
    ),
    "exclude_from_weight_decay not a bool": lambda d: _sgd(d).update(
        exclude_from_weight_decay="yes"
    ),
    "unknown scheduler nested in SequentialLR": lambda d: _init(d).update(
        schedulers=[{"SequentialLR": {"schedulers": [{"LinearLRR": {}}]}}]
    ),
    "bound on each tuple element": lambda d: _init(d).update(
        optimizer={"Adam": {"lr": 0.1, "betas": [0.9, 1.5]}}
    ),
    "tuple of the wrong length": lambda d: _init(d).update(
        optimizer={"Adam": {"lr": 0.1, "betas": [0.9, 0.99, 0.999]}}
    ),
    "plugins not a list of strings": lambda d: d.update(plugins=[1]),
    "a run file that is a list": lambda d: [d],
    "unknown sparsity algorithm": lambda d: _init(d).update(
        sparsity={"algorithm": "prune", "sparsity": 0.5}
    ),
    "sparsity argument of another algorithm": lambda d: _init(d).update(
        sparsity={"sparsity": 0.5, "update": {"freq": 2}}
    ),
    "sparsity level of 1": lambda d: _init(d).update(sparsity=1.0),
    "sparsity as a string": lambda d: _init(d).update(sparsity="dense"),
    "sparsity algorithm and type": lambda d: _init(d).update(
        sparsity={"algorithm": "set", "type": "set", "sparsity": 0.5}
    ),
    "sparsity and schedule": lambda d: _init(d).update(
        sparsity={"algorithm": "set", "sparsity": 0.5, "schedule": 0.5}
    ),
    "param_filter not a glob": lambda d: _init(d).update(
        sparsity={"sparsity": 0.5, "param_filter": 3}
    ),
    "add_summaries in trainer.init.sparsity": lambda d: _init(d).update(
        sparsity={"sparsity": 0.5, "add_summaries": True}
    ),
    "empty list of sparsity groups": lambda d: _init(d).update(sparsity=[]),
}

GOOD: dict[str, Mutation] = {
    "sparsity level": lambda d: _init(d).update(sparsity=0.75),
    "sparsity group like Model Zoo's GPT-3 RigL": lambda d: _init(d).update(
        sparsity={
            "sparsity": 0.75,
            "init_method": "random",
            "algorithm": "rigl",
            "drop_fraction": {"type": "cosine", "init": 0.3, "half_period": 3584},
            "update": {"freq": 100, "stop": 3584},
            "param_filter": ["*proj_[qkv]_dense_layer.weight", "*linear_layer.weight"],
        }
    ),
    "sparsity groups in a list, schedule alias, deprecated type": lambda d: _init(d).update(
        sparsity=[
            {"algorithm": "GMP", "schedule": [0.1, 0.2], "param_filter": "fc1.*"},
            {"type": "static", "sparsity": 0.5},
            {"sparsity": 0.3},
        ]
    ),
    "cstorch's groups shape": lambda d: _init(d).update(
        sparsity={"groups": [{"algorithm": "set", "params": {"sparsity": 0.5}}]}
    ),
    "legacy top-level sparsity with add_summaries": lambda d: d.update(
        sparsity={"add_summaries": True, "sparsity": 0.5}
    ),
    "null sparsity": lambda d: _init(d).update(sparsity=None),
    "case-insensitive names": lambda d: _init(d).update(
        optimizer={"sgd": {"lr": 0.1}}, device="cpu"
    ),
    "names qualified by the provider": lambda d: _init(d).update(
        optimizer={"plugtrain-optimizers:SGD": {"lr": 0.1}},
        schedulers=[
            {
                "schedulers:LinearLR": {
                    "initial_learning_rate": 0.1,
                    "end_learning_rate": 0.0,
                    "total_iters": 2,
                }
            }
        ],
    ),
    "alias instead of the argument": lambda d: _init(d).update(
        optimizer={"SGD": {"learning_rate": 0.1}}
    ),
    "backend mapping instead of device": lambda d: (
        _init(d).pop("device"),
        _init(d).update(backend={"backend_type": "CPU", "artifact_dir": None}),
    ),
    "integer for a float": lambda d: _sgd(d).update(lr=1),
    "one tagging filter as a mapping": lambda d: _sgd(d).update(
        params={"params": ["*bias", "*norm*"], "tag": "no_decay"}, exclude_from_weight_decay=False
    ),
    "nested sequential schedulers": lambda d: _init(d).update(
        schedulers=[
            {
                "SequentialLR": {
                    "schedulers": [
                        {
                            "LinearLR": {
                                "initial_learning_rate": 0.0,
                                "end_learning_rate": 0.1,
                                "total_iters": 10,
                            }
                        },
                        {
                            "CosineDecayLR": {
                                "initial_learning_rate": 0.1,
                                "end_learning_rate": 0.0,
                                "total_iters": 90,
                            }
                        },
                    ]
                }
            }
        ]
    ),
    "null where None is allowed": lambda d: _init(d).update(seed=None, checkpoint=None),
    "evaluate only": lambda d: (
        d["trainer"].pop("fit"),
        d["trainer"].update(validate={"val_dataloader": {"Digits": {"batch_size": 8}}}),
    ),
}


def _mutated(mutation: Mutation) -> Any:
    data = copy.deepcopy(QUICKSTART)
    returned = mutation(data)
    return returned if isinstance(returned, list) else data


@pytest.mark.parametrize("case", list(BAD))
def test_known_bad_run_files_fail_the_schema_and_the_check(case, validator, registry):
    data = _mutated(BAD[case])
    assert check_errors(registry, data), "plugtrain check accepts it"
    assert schema_errors(validator, data), "the JSON Schema accepts it"


@pytest.mark.parametrize("case", list(GOOD))
def test_accepted_variants_pass_the_schema_and_the_check(case, validator, registry):
    data = _mutated(GOOD[case])
    assert check_errors(registry, data) == []
    assert schema_errors(validator, data) == []


# -- arguments of any plugin -----------------------------------------------------------------


@attrs.frozen
class KitchenSinkArgs:
    """A component with every kind of argument.

    The second paragraph is part of the description.
    """

    rate: float = arg(help="a required rate", gt=0, le=1, aliases=("speed",))
    steps: int = arg(10, help="how many", ge=1)
    mode: Literal["a", "b"] = arg("a", help="one of two")
    level: str = arg("low", choices=("low", "high"))
    pair: tuple[float, float] = arg((0.5, 0.25), ge=0)
    sizes: list[int] | None = arg(None, lt=100)
    table: dict[str, float] = arg({})
    hook: Callable[[int], float] = arg(float, help="a function of the step")
    maybe_hook: Callable[[int], float] | None = arg(None, help="or nothing")
    child: dict[str, Any] | None = arg(None, component="model", help="another model")
    children: list[Any] = arg([], component="model", many=True)


class KitchenSinkPlugin:
    @plugtrain.hookimpl
    def plugtrain_register_models(self, registry):
        registry.register("Sink", "json:dumps", schema=KitchenSinkArgs, aliases=("Basin",))


@pytest.fixture
def sink(make_registry) -> dict[str, Any]:
    schema = run_file_schema(make_registry(KitchenSinkPlugin(), builtin=False))
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def test_arguments_carry_types_defaults_bounds_choices_and_help(sink):
    definition = sink["$defs"]["model.Sink"]
    assert definition["title"] == "Sink (model)"
    assert definition["description"].startswith("A component with every kind of argument.")
    assert "The second paragraph" in definition["description"]
    properties = definition["properties"]
    assert properties["rate"] == {
        "description": "a required rate",
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
    }
    assert properties["speed"]["description"] == "Alias of rate. a required rate"
    assert properties["steps"] == {
        "description": "how many",
        "default": 10,
        "type": "integer",
        "minimum": 1,
    }
    assert properties["mode"]["enum"] == ["a", "b"]
    assert properties["level"]["enum"] == ["low", "high"]
    pair = properties["pair"]
    assert pair["default"] == [0.5, 0.25]
    assert [item["minimum"] for item in pair["prefixItems"]] == [0, 0]
    assert pair["minItems"] == pair["maxItems"] == 2
    sizes = properties["sizes"]["anyOf"]
    assert {"type": "array", "items": {"type": "integer", "exclusiveMaximum": 100}} in [
        {k: v for k, v in branch.items() if k != "exclusiveMaximum"} for branch in sizes
    ]
    assert properties["table"]["additionalProperties"] == {"type": "number"}
    assert properties["hook"] == {
        "description": "a function of the step (a Python object: only from Python, not in a run "
        "file)",
        "not": {},
    }
    assert properties["maybe_hook"]["type"] == "null"
    assert properties["child"]["anyOf"][0] == {"$ref": "#/$defs/model"}
    assert properties["children"]["items"] == {"$ref": "#/$defs/model"}
    assert definition["additionalProperties"] is False


def test_a_required_argument_with_an_alias_may_be_given_under_either_name(sink):
    model = {**sink, "$ref": "#/$defs/model"}
    model.pop("properties", None)
    model.pop("required", None)
    model.pop("allOf", None)
    model.pop("additionalProperties", None)
    model.pop("type", None)
    check = jsonschema.Draft202012Validator(model)
    assert check.is_valid({"Sink": {"rate": 0.5}})
    assert check.is_valid({"Basin": {"speed": 0.5}})
    assert check.is_valid({"sink": {"rate": 0.5, "child": {"Sink": {"rate": 1}}}})
    assert check.is_valid({"KitchenSinkPlugin:Sink": {"rate": 0.5}})
    assert not check.is_valid({"Sink": {}})
    assert not check.is_valid({"Sink": {"rate": 0.5, "speed": 0.5}})
    assert not check.is_valid({"Sink": {"rate": 0}})
    assert not check.is_valid({"Sink": {"rate": 0.5, "hook": "lambda s: 1"}})
    assert not check.is_valid({"Sink": {"rate": 0.5, "pair": [0.1, -1]}})
    assert not check.is_valid({"Sink": {"rate": 0.5, "children": [{"Sink": {"rate": 2}}]}})


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (bool, {"type": "boolean"}),
        (int | None, {"type": ["integer", "null"]}),
        (
            str | list[str],
            {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        ),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (Any, {}),
        (Literal[1, "x"], {"enum": [1, "x"]}),
        (Path, {"not": {}}),
    ],
)
def test_annotations_map_to_json_schema_types(annotation, expected):
    assert type_schema(annotation) == expected


# -- the command -----------------------------------------------------------------------------


def test_schema_command_writes_the_file(tmp_path, capsys, registry):
    target = tmp_path / "plugtrain.schema.json"
    assert main(["schema", "-o", str(target)]) == 0
    assert capsys.readouterr().out == f"wrote {target}\n"
    written = json.loads(target.read_text(encoding="utf-8"))
    assert "SGD" in written["$defs"]["optimizer"]["properties"]
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == written


def test_generating_the_schema_imports_no_torch(tmp_path):
    code = (
        "import sys, contextlib, io\n"
        "from plugtrain.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['schema']) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=HANG_LIMIT_S,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("many", [False, True], ids=["one loader", "a list"])
def test_validate_all_takes_one_data_loader_or_a_list(many, validator, registry):
    data = copy.deepcopy(QUICKSTART)
    loader = {"Digits": {"batch_size": 64, "split": "val"}}
    data["trainer"]["validate_all"] = {"val_dataloaders": [loader, loader] if many else loader}
    assert schema_errors(validator, data) == []
    assert check_errors(registry, data) == []
    data["trainer"]["validate_all"]["val_dataloaders"] = {"Digits": {"batch_size": 0}}
    assert schema_errors(validator, data) != []


SPARSITY_CORPUS = sorted(
    p
    for p in (REPO / "tests" / "data" / "modelzoo").glob("gpt3_*.yaml")
    if "sparsity:" in p.read_text(encoding="utf-8")
)


def test_the_sparsity_corpus_has_the_six_model_zoo_files():
    assert len(SPARSITY_CORPUS) == 6


@pytest.mark.parametrize("path", SPARSITY_CORPUS, ids=[p.name for p in SPARSITY_CORPUS])
def test_model_zoo_sparsity_sections_pass_the_schema_and_the_check(path, validator, registry):
    written = load_yaml(path.read_text(encoding="utf-8"), str(path))
    data = copy.deepcopy(QUICKSTART)
    _init(data)["sparsity"] = written["trainer"]["init"]["sparsity"]
    assert check_errors(registry, data) == []
    assert schema_errors(validator, data) == []
