"""docs/other-trainers.md, run: every example, and the learning rates of Lightning and of the
Hugging Face Trainer against plugtrain's own Trainer, straight and resumed from a checkpoint."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

import plugtrain
from plugtrain.train.assembly.run import build_component
from plugtrain.train.trainer import Trainer

pytest.importorskip("plugtrain_schedulers", reason="plugtrain-schedulers is not installed")
pytest.importorskip("plugtrain_optimizers", reason="plugtrain-optimizers is not installed")

PAGE = Path(__file__).parents[2] / "docs" / "other-trainers.md"
STEPS = 30
RESUME_AT = 12  # three epochs of 4 batches: Lightning resumes at an epoch's end


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL)


def _run(block: int, namespace: dict | None = None) -> tuple[dict, str]:
    """Run the page's setup block and then block ``block``; their names and what they print."""
    namespace = {"__name__": "other_trainers_page"} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_blocks()[0], str(PAGE), "exec"), namespace)
        if block:
            exec(compile(_blocks()[block], str(PAGE), "exec"), namespace)
    return namespace, out.getvalue()


@pytest.fixture(scope="module")
def plugtrain_lrs(tmp_path_factory):
    """The learning rates plugtrain's own Trainer uses at each of 30 steps (every group)."""
    from plugtrain.backend_base import release_backend_type

    page, _ = _run(0)
    registry = plugtrain.get_registry()
    seen: list[list[float]] = []

    class Record:
        def on_before_optimizer_step(self, trainer, optimizer):
            seen.append([group["lr"] for group in optimizer.param_groups])

    release_backend_type()
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path_factory.mktemp("plugtrain"),
        model=page["Net"],
        optimizer=lambda model: (
            plugtrain.build_optimization(
                model, {"optimizer": page["CONFIG"]["optimizer"]}
            ).optimizer
        ),
        schedulers=[
            lambda optimizer, spec=spec: build_component(registry, "scheduler", spec, optimizer)
            for spec in page["CONFIG"]["schedulers"]
        ],
        loop={"max_steps": STEPS},
        callbacks=[Record()],
        seed=0,
    )
    trainer.fit(torch.utils.data.DataLoader(page["dataset"](), batch_size=8))
    release_backend_type()
    assert len(seen) == STEPS
    return seen


def test_the_own_loop_example_runs_and_its_schedule_is_plugtrains():
    page, printed = _run(1)
    built = page["built"]
    assert isinstance(built.schedulers[0], torch.optim.lr_scheduler.LRScheduler)
    assert built.schedulers[0].last_epoch == 8
    assert printed.strip() == str(built.schedulers[0].get_last_lr())
    assert [g.get("tags") for g in built.optimizer.param_groups] == [None, None, {"head"}, {"head"}]


def test_the_tagging_example_prints_what_it_says():
    _, printed = _run(2)
    lines = printed.strip().splitlines()
    assert lines[0] == str(
        [([], ["body.weight"]), (["bias"], ["body.bias"]), (["head"], ["head.weight"]),
         (["bias", "head"], ["head.bias"])]
    )  # fmt: skip
    assert lines[1] == "[0.1, 0.1, 0.0, 0.0]"
    assert "# [0.1, 0.1, 0.0, 0.0]" in _blocks()[2]


def _lightning_lrs(page, root, max_steps, ckpt_path=None):
    """Fit a recording subclass of the page's TinyModule; its trainer and the module.

    The module records the rates of each step and, at the start of training (after Lightning
    restored a checkpoint), its weights, optimizer state and scheduler position.
    """
    import lightning

    class Recording(page["TinyModule"]):
        def __init__(self):
            super().__init__()
            self.seen = []
            self.at_start = None

        def on_train_start(self):
            scheduler = self.trainer.lr_scheduler_configs[0].scheduler
            self.at_start = _snapshot(self, self.trainer.optimizers[0], scheduler)

        def on_before_optimizer_step(self, optimizer):
            self.seen.append([group["lr"] for group in optimizer.param_groups])

    torch.manual_seed(0)
    module = Recording()
    trainer = lightning.Trainer(
        max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=root,
    )  # fmt: skip
    loader = torch.utils.data.DataLoader(page["dataset"](), batch_size=8)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return trainer, module


def _snapshot(module, optimizer, scheduler):
    """Weights, optimizer state and scheduler position, copied."""
    return (
        [p.detach().clone() for p in module.parameters()],
        torch.utils._pytree.tree_map(
            lambda v: v.clone() if isinstance(v, torch.Tensor) else v, optimizer.state_dict()
        ),
        scheduler.state_dict(),
        [group["lr"] for group in optimizer.param_groups],
    )


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@pytest.mark.filterwarnings("ignore:.*does not have many workers")
@pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")
@pytest.mark.slow
def test_lightning_takes_the_schedulers_as_they_are_and_resumes_exactly(tmp_path, plugtrain_lrs):
    """Resumed, Lightning restores weights, optimizer and schedule exactly and the rates go on.

    (The batches do not: Lightning 2.6 resuming a run stopped by max_steps at an epoch's end
    replays one batch, whatever the optimizer; so weights are compared at the restore.)
    """
    pytest.importorskip("lightning", reason="lightning is not installed")
    page, _ = _run(3)  # the page's own example: 30 steps, no override
    assert page["trainer"].global_step == STEPS
    _, straight = _lightning_lrs(page, tmp_path / "a", STEPS)
    assert straight.seen == plugtrain_lrs
    first, stopped = _lightning_lrs(page, tmp_path / "b", RESUME_AT)
    checkpoint = tmp_path / "b" / "stop.ckpt"
    first.save_checkpoint(checkpoint)
    saved = _snapshot(stopped, first.optimizers[0], first.lr_scheduler_configs[0].scheduler)
    _, resumed = _lightning_lrs(page, tmp_path / "c", STEPS, ckpt_path=checkpoint)
    assert _same(resumed.at_start, saved)
    assert saved[2]["last_step"] == RESUME_AT
    assert stopped.seen + resumed.seen == plugtrain_lrs


def _hf_lrs(page, output, max_steps, *, save_at=None, resume=None):
    import transformers

    seen = []

    class Record(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            seen.append([group["lr"] for group in kwargs["optimizer"].param_groups])

    torch.manual_seed(0)
    model = page["TinyForTrainer"]()
    built = plugtrain.build_optimization(model.net, page["CONFIG"])
    arguments = transformers.TrainingArguments(
        output_dir=str(output), max_steps=max_steps, per_device_train_batch_size=8,
        report_to=[], use_cpu=True, logging_strategy="no", disable_tqdm=True, seed=0,
        save_strategy="steps" if save_at else "no", save_steps=save_at or 500,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=arguments, train_dataset=page["Examples"](),
        optimizers=(built.optimizer, built.schedulers[0]), callbacks=[Record()],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)
    return seen, model


@pytest.mark.slow
def test_the_hugging_face_trainer_takes_them_and_resumes_exactly(tmp_path, plugtrain_lrs,
                                                                  monkeypatch):  # fmt: skip
    pytest.importorskip("transformers", reason="transformers is not installed")
    pytest.importorskip("accelerate", reason="accelerate is not installed")
    monkeypatch.chdir(tmp_path)  # the page's example writes hf-run/ here
    page, _ = _run(4)
    assert page["trainer"].state.global_step == STEPS
    straight, straight_model = _hf_lrs(page, tmp_path / "a", STEPS, save_at=RESUME_AT)
    assert straight == plugtrain_lrs
    resumed, resumed_model = _hf_lrs(
        page, tmp_path / "b", STEPS, resume=str(tmp_path / "a" / f"checkpoint-{RESUME_AT}")
    )
    assert resumed == plugtrain_lrs[RESUME_AT:]
    for a, b in zip(straight_model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(a, b)
