"""The Trainer's narrow views: what callbacks and the rooms read of it, typed and kept true."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest
import torch

import plugtrain
from plugtrain.builtin.models import MLP
from plugtrain.contract import _callback_protocols
from plugtrain.protocols import CALLBACK_HOOKS, Callback, TrainerView
from plugtrain.train.loop.evaluation import EvaluatedTrainer
from plugtrain.train.loop.nan_guard import GuardedTrainer
from plugtrain.train.loop.step import SteppedTrainer
from plugtrain.train.loop.training_loop import LoopedTrainer
from plugtrain.train.loop.validation import ValidatedTrainer
from plugtrain.train.observability.fit_summary import SummarizedTrainer
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")

REPO = Path(__file__).resolve().parents[2]

VIEWS = (
    TrainerView,
    LoopedTrainer,
    SteppedTrainer,
    EvaluatedTrainer,
    ValidatedTrainer,
    GuardedTrainer,
    SummarizedTrainer,
)


def _members(protocol: type) -> set[str]:
    """The attributes and methods a Protocol class and its protocol bases declare."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        if klass is typing.Protocol or klass.__module__ == "typing":
            continue
        names.update(getattr(klass, "__annotations__", {}))
        names.update(n for n in vars(klass) if not n.startswith("_"))
    return names


def test_every_callback_hook_takes_the_public_view() -> None:
    namespace = vars(_callback_protocols)
    for hook in CALLBACK_HOOKS:
        hints = typing.get_type_hints(getattr(Callback, hook), namespace)
        assert hints["trainer"] is TrainerView, hook


def test_the_views_list_what_callbacks_were_promised() -> None:
    promised = {
        "model",
        "optimizer",
        "schedulers",
        "backend",
        "model_dir",
        "loop",
        "checkpoint",
        "logging",
        "global_step",
        "target_step",
        "samples_seen",
        "is_main_process",
        "callbacks",
        "loggers",
        "precision",
        "sparsity",
        "strategy",
        "seed",
        "config",
    }
    assert promised <= _members(TrainerView)


def test_a_trainer_has_every_member_of_every_view(tmp_path: Path) -> None:
    sgd = plugtrain.resolve("optimizer", "SGD")
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path / "run",
        model=lambda: MLP(in_features=4, out_features=2, hidden=8),
        optimizer=lambda model: sgd(model.parameters(), lr=0.1),
        loop={"max_steps": 2},
        logging={"log_steps": 1},
        seed=0,
    )
    batches = [(torch.randn(3, 4), torch.randint(0, 2, (3,))) for _ in range(2)]
    trainer.fit(batches)
    for view in VIEWS:
        missing = [name for name in sorted(_members(view)) if not hasattr(trainer, name)]
        assert missing == [], view.__name__
    assert trainer.stream is not None  # SummarizedTrainer.stream, read by the progress logger


def _plugin_hook_annotations() -> list[tuple[str, str]]:
    """``(where, annotation)`` of the ``trainer`` argument of every callback hook in the plugins."""
    found = []
    for path in sorted((REPO / "plugins").glob("*/src/**/*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name not in CALLBACK_HOOKS:
                continue
            arguments = [a for a in node.args.args if a.arg == "trainer"]
            if arguments:
                annotation = arguments[0].annotation
                text = "" if annotation is None else ast.unparse(annotation)
                found.append((f"{path.relative_to(REPO)}:{node.lineno}", text))
    return found


def test_the_plugins_callbacks_annotate_the_public_view() -> None:
    found = _plugin_hook_annotations()
    assert len(found) >= 30  # the callbacks of plugtrain-callbacks, -models and -sparsity
    assert [where for where, text in found if text != "TrainerView"] == []


def test_the_view_is_importable_without_torch_from_the_public_module() -> None:
    source = inspect.getsource(_callback_protocols)
    tree = ast.parse(source)
    runtime = [
        node
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(a.name.split(".")[0] == "torch" for a in node.names)
    ]
    assert runtime == []
    assert plugtrain.protocols.TrainerView is TrainerView
