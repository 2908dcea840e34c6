"""Plugin API 1.1 with real installs: a 1.0-era plugin keeps working, and a 1.1 example works.

Both packages are installed by pip once per module, into one ``--target`` directory (from
copies, offline, with this environment's setuptools), and used from subprocesses with that
directory on ``PYTHONPATH``, as after ``pip install``:

- ``tests/data/acme-plugtrain-wsd-legacy`` (``acme-plugtrain-wsd``, declaring API 1.0): its
  warmup-stable-decay curve is a plain callable without ``at``; nested in ``SequentialLR`` it
  is stepped, evaluated in closed form (what ``check`` and ``plot`` do) and trained with.
- ``examples/acme-plugtrain-averaging`` (declaring 1.1), written against the documented API
  only: Schedule-Free SGD, a weight EMA callback and a weight-decay ramp.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from support.offline_install import clean_environment

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "acme-plugtrain-wsd": REPO / "tests" / "data" / "acme-plugtrain-wsd-legacy",
    "acme-plugtrain-averaging": REPO / "examples" / "acme-plugtrain-averaging",
}
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


@pytest.fixture(scope="module")
def site(install_offline: Callable[[str, Sequence[Path]], Path]) -> Path:
    """One directory into which pip installed both packages."""
    return install_offline("api-1-1", list(PACKAGES.values()))


def _python(site: Path, script: str, *arguments: str, cwd: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=clean_environment(PYTHONPATH=str(site)),
        cwd=cwd,
        timeout=HANG_LIMIT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


LEGACY = """
import contextlib, io, json, sys
import torch
import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.curve import closed_form
from plugtrain.discovery.loading import get_registry, plugin_summary
from plugtrain.train.trainer import Trainer

wsd = {"WSD": {"peak_learning_rate": 0.1, "warmup_steps": 2, "stable_steps": 2,
               "decay_steps": 2}}
constant = {"ConstantLR": {"learning_rate": 0.01}}
sequential = {"SequentialLR": {"schedulers": [wsd, constant]}}  # milestones from WSD's length
out = {}
SequentialLR = plugtrain.resolve("scheduler", "SequentialLR")
param = torch.nn.Parameter(torch.zeros(2))
optimizer = plugtrain.resolve("optimizer", "SGD")([param], lr=1.0)
scheduler = SequentialLR(optimizer, **sequential["SequentialLR"])
stepped = []
for _ in range(8):
    stepped.append(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
out["stepped"] = stepped
curve = closed_form(get_registry(), sequential).curve
out["closed_form"] = [curve.at(step) for step in range(8)]
trainer = Trainer(
    device="CPU", model_dir=sys.argv[1], seed=1,
    model=lambda: MLP(in_features=6, hidden=8, out_features=3),
    optimizer=lambda model: plugtrain.resolve("optimizer", "SGD")(model.parameters(), lr=1.0),
    schedulers=[lambda o: SequentialLR(o, **sequential["SequentialLR"])],
    loop={"max_steps": 7}, logging={"log_steps": 1},
)
trainer.fit(synthetic_loader(batch_size=8, num_examples=64, in_features=6, num_classes=3))
rows = [json.loads(line) for line in open(sys.argv[1] + "/metrics.jsonl")]
out["trained_lr"] = [row["lr/0"] for row in rows if row["split"] == "train"]
out["api"] = {row["name"]: row["api"] for row in plugin_summary(get_registry())}
from plugtrain.cli import main
listing = io.StringIO()
with contextlib.redirect_stdout(listing):
    assert main(["plugins"]) == 0
out["plugins_first_line"] = listing.getvalue().splitlines()[0]
print(json.dumps(out))
"""


def test_a_plugin_written_for_api_1_0_still_nests_in_sequential_lr(site, tmp_path):
    out = _python(site, LEGACY, str(tmp_path / "run"), cwd=tmp_path)
    wsd = [0.05, 0.1, 0.1, 0.1, 0.1, 0.05]  # warmup 2, stable 2, decay 2 (to 0 at step 6)
    want = [*wsd, 0.01, 0.01]
    assert out["stepped"] == pytest.approx(want, abs=1e-12)
    assert out["closed_form"] == pytest.approx(want, abs=1e-12)
    # metrics log, at step s, the rate of the step after it (the schedulers have stepped)
    assert out["trained_lr"] == pytest.approx(want[1:8], abs=1e-12)
    assert out["api"]["acme_wsd"] == ["1.0"]
    assert out["api"]["acme_averaging"] == ["1.1"]
    assert out["plugins_first_line"].endswith("provides plugin API 1.1")


EXAMPLE = """
import json, sys
from pathlib import Path
import torch
import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.scheduler import excluded_from_decay
from plugtrain.bases.param_groups import build_param_groups
from plugtrain.train.trainer import Trainer

root = Path(sys.argv[1])
ScheduleFreeSGD = plugtrain.resolve("optimizer", "ScheduleFreeSGD")
WeightEMA = plugtrain.resolve("callback", "WeightEMA")
RampWD = plugtrain.resolve("scheduler", "RampWD")


def data(split):
    return synthetic_loader(batch_size=8, num_examples=64, in_features=6, num_classes=3,
                            split=split)


class HalveForEvaluation:
    # another party's save/restore callback: evaluates halved weights, then restores them
    def on_validate_start(self, trainer):
        self.kept = [p.detach().clone() for p in trainer.model.parameters()]
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.mul_(0.5)

    def on_validate_end(self, trainer, metrics):
        with torch.no_grad():
            for p, kept in zip(trainer.model.parameters(), self.kept):
                p.copy_(kept)


class WatchDecay:
    def __init__(self):
        self.seen = []

    def on_train_step_start(self, trainer, step):
        groups = trainer.optimizer.param_groups
        self.seen.append([(g["weight_decay"], excluded_from_decay(g)) for g in groups])


def trainer(name, callbacks):
    return Trainer(
        device="CPU", model_dir=root / name, seed=5,
        model=lambda: MLP(in_features=6, hidden=8, out_features=3),
        optimizer=lambda m: ScheduleFreeSGD(build_param_groups(m), lr=0.05, weight_decay=0.01),
        schedulers=[lambda o: RampWD(o, initial_weight_decay=0.02, total_iters=6)],
        loop={"max_steps": 6, "eval_frequency": 3, "eval_steps": 2},
        checkpoint={"steps": 3}, logging={"log_steps": 1}, callbacks=callbacks,
    )


def val_losses(name):
    rows = [json.loads(line) for line in (root / name / "metrics.jsonl").open()]
    return [row["loss"] for row in rows if row["split"] == "val"]


out = {}
watch = WatchDecay()
plain = trainer("plain", [watch])
plain.fit(data("train"), data("val"))
out["decay"] = watch.seen
# the averaged weights x = (y - (1 - beta) z) / beta, by hand from the optimizer's state
optimizer = plain.optimizer
scorer = trainer("scorer", [])
with torch.no_grad():
    for (name, y), target in zip(plain.model.named_parameters(), scorer.model.parameters()):
        z = optimizer.state[y]["z"]
        target.copy_((y - (1 - 0.9) * z) / 0.9)
out["averaged_score"] = scorer.evaluation.evaluate(data("val"), 2)["loss"]
out["training_weights_score"] = plain.evaluation.evaluate(data("val"), 2)["loss"]
out["logged"] = val_losses("plain")[-1]

ema = WeightEMA(decay=0.5)
composed = trainer("composed", [HalveForEvaluation(), ema, WatchDecay()])
composed.fit(data("train"), data("val"))
pairs = zip(plain.model.state_dict().values(), composed.model.state_dict().values())
out["weights_bitwise_equal"] = all(torch.equal(a, b) for a, b in pairs)
states = zip(plain.optimizer.state.values(), composed.optimizer.state.values())
out["optimizer_bitwise_equal"] = all(torch.equal(a["z"], b["z"]) for a, b in states)
out["composed_logged"] = val_losses("composed")

# the callback before the EMA removed: the EMA still gets its state back
alone = WeightEMA(decay=0.5)
resumed = trainer("resumed", [alone])
resumed.load_checkpoint(composed.checkpoint_path(6))
out["ema_state_kept"] = bool(ema.average) and all(
    torch.equal(alone.average[k], v) for k, v in ema.average.items()
)
print(json.dumps(out))
"""


def test_the_averaging_example_composes_with_no_workaround(site, tmp_path):
    out = _python(site, EXAMPLE, str(tmp_path), cwd=tmp_path)
    # the logged validation loss is the averaged weights' score, with no callback for it
    assert out["logged"] == pytest.approx(out["averaged_score"], rel=1e-5)
    assert out["logged"] != pytest.approx(out["training_weights_score"], rel=1e-5)
    # EMA and a save/restore callback nest: training continues bitwise as without them
    assert out["weights_bitwise_equal"]
    assert out["optimizer_bitwise_equal"]
    assert out["composed_logged"][-1] != pytest.approx(out["logged"], rel=1e-5)  # they acted
    # removing the callback listed before the EMA keeps the EMA's state
    assert out["ema_state_kept"]
    # the weight-decay ramp leaves the zero-decay group (biases) at 0
    assert [len(groups) for groups in out["decay"]] == [2] * 6
    assert all(groups[1] == [0.0, True] for groups in out["decay"])
    assert [groups[0][0] for groups in out["decay"]] == pytest.approx(
        [0.02 * (1 - s / 6) for s in range(6)]
    )
