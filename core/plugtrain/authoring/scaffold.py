"""``plugtrain new KIND NAME [KIND NAME ...]``: write a complete plugin distribution.

The package (src layout) has a ``pyproject.toml`` with the ``plugtrain`` entry point and the
``plugtrain.api`` declaration, a torch-free ``schemas.py``, one implementation module per
component that already works (an SGD with momentum and a foreach path, a linear scheduler on
the core's base, a step-counting callback, a JSON-lines logger, a CPU backend, a two-layer
model, a synthetic data loader, a magnitude-pruning sparsity algorithm), its own
``conftest.py``, tests that use the conformance kit of :mod:`plugtrain.testing`, a README, an
example run file and a CI workflow running the tests against the oldest and the newest
plugtrain the package allows.

The files come from ``scaffold_templates/`` (``string.Template``). Imports no torch.
"""

from __future__ import annotations

import json
import keyword
import re
import string
import textwrap
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import attrs

from plugtrain.discovery.compat import core_requirement
from plugtrain.registry.kinds import KINDS

__all__ = ["SCAFFOLD_KINDS", "ScaffoldError", "Spec", "parse_specs", "write_package"]

SCAFFOLD_KINDS = (
    "optimizer",
    "scheduler",
    "callback",
    "logger",
    "backend",
    "model",
    "dataloader",
    "sparsity",
)
"""The kinds ``plugtrain new`` writes."""


class ScaffoldError(ValueError):
    """A bad ``plugtrain new`` request (unknown kind, bad name, existing folder ...)."""


@attrs.frozen
class Spec:
    """One component to write: its kind and the name users write (``Prodigy``)."""

    kind: str
    name: str

    @property
    def snake(self) -> str:
        """``ProdigyLR`` -> ``prodigy_lr``: the module name (and a data loader's function)."""
        return _snake(self.name)

    @property
    def args_class(self) -> str:
        """The schema class: ``ProdigyArgs``."""
        return f"{self.name}Args"

    @property
    def schedule_key(self) -> str:
        """What a scheduler writes: ``"weight_decay"`` for a name ending in ``WD``, else lr."""
        return "weight_decay" if self.kind == "scheduler" and self.name.endswith("WD") else "lr"

    @property
    def values(self) -> dict[str, str]:
        """The template values of this component."""
        wd = self.schedule_key == "weight_decay"
        return {
            "Name": self.name,
            "Args": self.args_class,
            "snake": self.snake,
            "key": self.schedule_key,
            "suffix": "weight_decay" if wd else "learning_rate",
            "quantity": "weight decay" if wd else "learning rate",
        }

    @property
    def target(self) -> str:
        """The attribute registered: the class, or the function of a data loader."""
        return self.snake if self.kind == "dataloader" else self.name


def _snake(name: str) -> str:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return spaced.lower()


_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_PACKAGE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def parse_specs(words: Sequence[str]) -> list[Spec]:
    """``["optimizer", "Prodigy", "scheduler", "WarmupLR"]`` -> two :class:`Spec`.

    :raises ScaffoldError: for an odd number of words, an unknown kind, a name that is not a
        Python class name (letters and digits, starting with a letter), or a name given twice.
    """
    if not words or len(words) % 2:
        message = "give KIND NAME pairs, e.g. plugtrain new optimizer Prodigy scheduler WarmupLR"
        raise ScaffoldError(message)
    specs = [Spec(words[i].lower(), words[i + 1]) for i in range(0, len(words), 2)]
    for spec in specs:
        if spec.kind not in SCAFFOLD_KINDS:
            message = (
                f"unknown kind {spec.kind!r}; plugtrain new writes: {', '.join(SCAFFOLD_KINDS)}"
            )
            raise ScaffoldError(message)
        if not _NAME.match(spec.name) or keyword.iskeyword(spec.name):
            message = (
                f"{spec.kind} name {spec.name!r} must be a class name: letters and digits, "
                "starting with a letter (e.g. Prodigy)"
            )
            raise ScaffoldError(message)
    seen: set[str] = set()
    for spec in specs:
        if spec.snake in seen:
            message = f"two components would share the module {spec.snake}.py ({spec.name})"
            raise ScaffoldError(message)
        seen.add(spec.snake)
    return specs


def default_package(specs: Sequence[Spec]) -> str:
    """``plugtrain-prodigy`` for a first component ``Prodigy``."""
    return "plugtrain-" + specs[0].snake.replace("_", "-")


def entry_point_name(package: str) -> str:
    """The plugin's name (its ``plugtrain`` entry point), from the distribution's name.

    ``plugtrain-prodigy`` -> ``prodigy``, ``acme-plugtrain-tools`` -> ``acme_tools``: what
    ``-p no:NAME`` blocks, the same for every component of the package.
    """
    words = [w for w in package.split("-") if w != "plugtrain"]
    return "_".join(words) or package.replace("-", "_")


def _template(name: str) -> string.Template:
    folder = resources.files("plugtrain.authoring") / "scaffold_templates"
    return string.Template((folder / f"{name}.tmpl").read_text(encoding="utf-8"))


def _fill(name: str, **values: str) -> str:
    return _template(name).substitute(values)


# What each kind's schema needs imported, as (module, name).
_SCHEMA_IMPORTS: dict[str, tuple[tuple[str, str], ...]] = {
    "optimizer": (
        ("collections.abc", "Iterator"),
        ("collections.abc", "Mapping"),
        ("typing", "Any"),
        ("plugtrain.schema", "Problem"),
        ("plugtrain.schema", "about"),
    ),
    "scheduler": (
        ("collections.abc", "Mapping"),
        ("typing", "Any"),
        ("typing", "ClassVar"),
        ("plugtrain.curve", "Curve"),
        ("plugtrain.scheduler", "ChildCurve"),
        ("plugtrain.scheduler", "ScheduleSchema"),
        ("plugtrain.scheduler", "tags_arg"),
    ),
    "dataloader": (("typing", "Literal"),),
}

# The arguments the example run file and the contract's round trip give each kind.
_RUN_ARGUMENTS = {
    "optimizer": "{lr: 0.05, momentum: 0.9}",
    "scheduler": "{initial_learning_rate: 0.05, end_learning_rate: 0.005, total_iters: 60}",
}
_CONTRACT_ARGUMENTS: dict[str, dict[str, object]] = {
    "optimizer": {"lr": 0.05},
    "scheduler": {"initial_learning_rate": 0.1, "total_iters": 5},
    "model": {"in_features": 4, "out_features": 3},
    "dataloader": {"batch_size": 8},
    "sparsity": {"sparsity": 0.5},
}


def _contract_arguments(spec: Spec) -> dict[str, object]:
    """The arguments the contract's round trip builds ``spec`` with."""
    arguments = _CONTRACT_ARGUMENTS[spec.kind]
    if spec.schedule_key == "weight_decay":
        return {k.replace("learning_rate", "weight_decay"): v for k, v in arguments.items()}
    return arguments


def _imports(specs: Sequence[Spec]) -> str:
    wanted = {pair for spec in specs for pair in _SCHEMA_IMPORTS.get(spec.kind, ())}
    wanted |= {("plugtrain.schema", "arg")}
    by_module: dict[str, set[str]] = {}
    for module, name in wanted:
        by_module.setdefault(module, set()).add(name)

    def line(module: str) -> str:
        names = sorted(by_module[module], key=lambda n: (not n[0].isupper(), n))
        return f"from {module} import {', '.join(names)}"

    stdlib = [line(m) for m in sorted(by_module) if not m.startswith("plugtrain")]
    ours = [line(m) for m in sorted(by_module) if m.startswith("plugtrain")]
    return "\n".join([*stdlib, "", "import attrs", "", *ours]).lstrip("\n") + "\n"


def _hooks(specs: Sequence[Spec], module: str) -> str:
    parts = []
    for kind in SCAFFOLD_KINDS:
        mine = [s for s in specs if s.kind == kind]
        if not mine:
            continue
        hook = KINDS[kind].hook
        names = ", ".join(f"``{s.name}``" for s in mine)
        lines = [
            "@hookimpl",
            f"def {hook}(registry: ComponentRegistrar) -> None:",
            f'    """Register {names}."""',
        ]
        for s in mine:
            call = (
                f'    registry.register("{s.name}", "{module}.{s.snake}:{s.target}", '
                f"schema=schemas.{s.args_class})"
            )
            if len(call) > 100:
                call = (
                    f"    registry.register(\n"
                    f'        "{s.name}", "{module}.{s.snake}:{s.target}", '
                    f"schema=schemas.{s.args_class}\n    )"
                )
            if max(len(line) for line in call.splitlines()) > 100:
                call = (
                    f'    registry.register(\n        "{s.name}",\n'
                    f'        "{module}.{s.snake}:{s.target}",\n'
                    f"        schema=schemas.{s.args_class},\n    )"
                )
            lines.append(call)
        parts.append("\n".join(lines))
    return "\n\n\n" + "\n\n\n".join(parts)


def _run_file(specs: Sequence[Spec], package: str) -> str:
    def first(kind: str) -> Spec | None:
        return next((s for s in specs if s.kind == kind), None)

    backend, model, optimizer = first("backend"), first("model"), first("optimizer")
    scheduler, data = first("scheduler"), first("dataloader")
    scheduler_arguments = _RUN_ARGUMENTS["scheduler"]
    if scheduler is not None and scheduler.schedule_key == "weight_decay":
        scheduler_arguments = scheduler_arguments.replace("learning_rate", "weight_decay")
        scheduler_arguments = scheduler_arguments.replace("0.05", "0.01").replace("0.005", "0.001")
    callbacks = [s for s in specs if s.kind == "callback"]
    loggers = [s for s in specs if s.kind == "logger"]
    sparsity = [s for s in specs if s.kind == "sparsity"]
    model_name = model.name if model else "MLP"
    data_name = data.name if data else "Digits"
    lines = [
        f"# An example run of {package}: plugtrain check examples/run.yaml, then plugtrain fit.",
        "# The components this package does not provide are plugtrain's own (MLP and Digits",
        "# come with plugtrain; SGD with plugtrain-optimizers, the CPU with plugtrain-backends).",
        "trainer:",
        "  init:",
        f"    backend: {{backend_type: {backend.name}, threads: 1}}"
        if backend
        else "    device: CPU",
        f"    model_dir: ./runs/{package}",
        "    seed: 1",
        f"    model: {{{model_name}: {{in_features: 64, out_features: 10}}}}",
        "    optimizer:",
        f"      {optimizer.name}: {_RUN_ARGUMENTS['optimizer']}"
        if optimizer
        else "      SGD: {lr: 0.05, momentum: 0.9}",
    ]
    if scheduler:
        lines += ["    schedulers:", f"      - {scheduler.name}: {scheduler_arguments}"]
    if sparsity:
        lines += [
            "    sparsity:",
            *(f"      - {{algorithm: {s.name}, sparsity: 0.5, every: 10}}" for s in sparsity),
        ]
    if callbacks:
        lines += ["    callbacks:", *(f"      - {s.name}: {{}}" for s in callbacks)]
    if loggers:
        logger_arguments = f"{{path: runs/{package}/{{name}}.jsonl}}"
        lines += [
            "    loggers:",
            *(f"      - {s.name}: {logger_arguments.replace('{name}', s.snake)}" for s in loggers),
        ]
    lines += [
        "    loop: {max_steps: 60, eval_frequency: 30, eval_steps: 2}",
        "    checkpoint: {steps: 30}",
        "    logging: {log_steps: 10}",
        "  fit:",
        f"    train_dataloader: {{{data_name}: {{batch_size: 64, split: train}}}}",
        f"    val_dataloader: {{{data_name}: {{batch_size: 64, split: val}}}}",
    ]
    return "\n".join(lines) + "\n"


def _arguments_literal(arguments: dict[str, object]) -> str:
    """``{Name: {argument: value}}`` as Python source, one component a line."""
    if not arguments:
        return "{}"
    rows = "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in arguments.items())
    return "{\n" + rows + "}"


def _sort_first_party(text: str, module: str) -> str:
    """Sort each run of one-line ``from`` imports of the package and plugtrain, as isort does."""
    lines = text.split("\n")

    def ours(line: str) -> bool:
        words = line.split()
        return (
            len(words) >= 4
            and words[0] == "from"
            and words[1].split(".")[0] in (module, "plugtrain")
            and not line.rstrip().endswith("(")
        )

    start = 0
    while start < len(lines):
        if not ours(lines[start]):
            start += 1
            continue
        end = start
        while end < len(lines) and ours(lines[end]):
            end += 1
        lines[start:end] = sorted(lines[start:end], key=lambda line: line.split()[1])
        start = end
    return "\n".join(lines)


def write_package(
    specs: Sequence[Spec], folder: Path, package: str | None = None, api: str | None = None
) -> list[Path]:
    """Write the distribution for ``specs`` into ``folder`` (created; must be empty or absent).

    :param package: the distribution name (default ``plugtrain-<first name>``); the import
        package is the same with underscores.
    :param api: the plugin API version to declare (default: this core's).
    :returns: the files written, sorted.
    :raises ScaffoldError: for a bad package name or a folder that holds files.
    """
    from plugtrain._version import PLUGIN_API_VERSION

    package = package or default_package(specs)
    if not _PACKAGE.match(package):
        message = (
            f"package name {package!r} must be lower-case letters, digits and single dashes "
            "(e.g. acme-plugtrain-prodigy)"
        )
        raise ScaffoldError(message)
    if folder.exists() and any(folder.iterdir()):
        message = f"{folder} exists and is not empty; choose another --dir"
        raise ScaffoldError(message)
    module = package.replace("-", "_")
    api = api or PLUGIN_API_VERSION
    entry = entry_point_name(package)
    described = ", ".join(f"the {s.name} {s.kind}" for s in specs)
    kinds = {s.kind for s in specs}
    common = {
        "package": package,
        "module": module,
        "entry": entry,
        "api": api,
        "api_major": api.split(".")[0],
        "core_requirement": core_requirement(api),
        "description": f"{described[0].upper()}{described[1:]} for plugtrain",
        "keywords": "".join(f', "{k}"' for k in dict.fromkeys(s.kind for s in specs)),
        # the kit nests a scheduler in plugtrain-schedulers' SequentialLR (tests only)
        "test_extra": ', "plugtrain-schedulers"' if "scheduler" in kinds else "",
    }
    files: dict[str, str] = {}
    files["pyproject.toml"] = _fill("pyproject.toml", **common)
    files["conftest.py"] = _fill("conftest.py", **common)
    files[".github/workflows/tests.yml"] = _fill("workflow.yml", **common)
    components = "\n".join(f"- `{s.name}` ({s.kind}): see `{s.snake}.py`" for s in specs)
    files["README.md"] = _fill(
        "README.md", **common, component_list=components, first_name=specs[0].name
    )
    source = f"src/{module}"
    files[f"{source}/__init__.py"] = _fill(
        "init.py", **common, wrapped=textwrap.fill(common["description"] + ".", width=96)
    )
    files[f"{source}/py.typed"] = ""
    files[f"{source}/plugin.py"] = _fill("plugin.py", **common, hooks=_hooks(specs, module))
    classes = "\n\n\n".join(_fill(f"{s.kind}.schema", **common, **s.values).strip() for s in specs)
    files[f"{source}/schemas.py"] = _fill(
        "schemas.py", **common, imports=_imports(specs), classes="\n" + classes
    )
    for s in specs:
        values = {**common, **s.values}
        files[f"{source}/{s.snake}.py"] = _fill(f"{s.kind}.impl", **values)
        files[f"tests/test_{s.snake}.py"] = _fill(f"{s.kind}.test", **values)
    arguments: dict[str, object] = {
        s.name: _contract_arguments(s) for s in specs if s.kind in _CONTRACT_ARGUMENTS
    }
    files["tests/test_plugin.py"] = _fill(
        "test_plugin.py", **common, contract_arguments=_arguments_literal(arguments)
    )
    files["examples/run.yaml"] = _run_file(specs, package)
    written = []
    for relative, content in files.items():
        text = _sort_first_party(content, module) if relative.endswith(".py") else content
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return sorted(written)
