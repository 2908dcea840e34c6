"""``loop.sample_order: global``: the same samples per optimizer step at any world size.

The sampler is checked directly for every split of a global batch of 16 over three epochs;
one real two-process ``plugtrain fit`` records the sample ids each rank loads and its weights
at step 20, against a one-process run of the same file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from support.plugtrain_cli import run_plugtrain
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from plugtrain.errors import ConfigError
from plugtrain.train.data.global_sampler import GlobalBatchSampler, follow_global_order
from plugtrain.train.data.sample_order import GlobalOrder

NUM_SAMPLES = 100  # 6 steps of 16 per epoch; 4 samples of each epoch's permutation unused
EPOCHS = 3


def _steps(batch: int, world: int, accum: int, shuffle: bool = True) -> list[list[int]]:
    """The sample ids of every optimizer step, in (micro-batch, rank) order, over EPOCHS."""
    order = GlobalOrder(NUM_SAMPLES, batch, world, accum, seed=7, shuffle=shuffle)
    samplers = [GlobalBatchSampler(order, rank, {}) for rank in range(world)]
    steps = []
    for epoch in range(EPOCHS):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        batches = [list(sampler) for sampler in samplers]
        assert {len(b) for b in batches} == {order.batches_per_epoch}
        for step in range(order.steps_per_epoch):
            ids = []
            for micro in range(accum):
                for rank in range(world):
                    ids.extend(batches[rank][step * accum + micro])
            steps.append(ids)
    return steps


def test_every_split_of_the_global_batch_takes_the_same_samples_each_step():
    one = _steps(16, 1, 1)
    assert len(one) == EPOCHS * (NUM_SAMPLES // 16)
    assert one == _steps(8, 2, 1)
    assert one == _steps(4, 2, 2)
    assert one == _steps(2, 4, 2)
    per_epoch = NUM_SAMPLES // 16
    for epoch in range(EPOCHS):
        seen = [i for step in one[epoch * per_epoch : (epoch + 1) * per_epoch] for i in step]
        assert len(set(seen)) == len(seen) == per_epoch * 16  # no sample twice in an epoch
    assert one[:per_epoch] != one[per_epoch : 2 * per_epoch]  # a new permutation each epoch
    assert one[0] == GlobalOrder(NUM_SAMPLES, 16, 1, 1, 7, True).step_samples(0, 0)


def test_without_shuffling_the_steps_walk_the_dataset_in_order():
    steps = _steps(4, 2, 2, shuffle=False)
    assert steps[0] == list(range(16))
    assert steps[5] == list(range(80, 96))
    assert steps[6] == list(range(16))  # the next epoch starts over


def _loader(**options: Any) -> DataLoader[Any]:
    data = TensorDataset(torch.arange(40))
    return DataLoader(data, batch_size=4, **options)


def test_a_shuffled_loader_is_rebuilt_seeded_by_its_generator_else_the_trainer_seed():
    seeded = _loader(shuffle=True, generator=torch.Generator().manual_seed(3))
    loader, reason = follow_global_order(seeded, rank=1, world_size=2, grad_accum_steps=1, seed=9)
    assert reason is None
    sampler = loader.batch_sampler
    assert isinstance(sampler, GlobalBatchSampler)
    assert sampler.order.seed == 3
    assert sampler.order.shuffle
    assert len(loader) == 5
    batches = [b[0].tolist() for b in loader]
    assert batches == [sampler.order.permutation(0)[8 * t + 4 : 8 * t + 8] for t in range(5)]
    plain, _ = follow_global_order(_loader(), rank=0, world_size=1, grad_accum_steps=1, seed=9)
    assert plain.batch_sampler.order.seed == 9
    assert not plain.batch_sampler.order.shuffle


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(8))


def test_loaders_that_cannot_follow_keep_their_order_and_say_why():
    data = TensorDataset(torch.arange(8))
    cases = {
        "its dataset is an IterableDataset": DataLoader(_Stream(), batch_size=2),
        "it has its own batch_sampler": DataLoader(
            TensorDataset(torch.arange(8)), batch_sampler=[[0, 1], [2, 3]]
        ),
        "it is a list, not a torch DataLoader": [torch.zeros(2)],
        "its RandomSampler draws with replacement or a num_samples": DataLoader(
            data, batch_size=2, sampler=torch.utils.data.RandomSampler(data, replacement=True)
        ),
    }
    for expected, loader in cases.items():
        same, reason = follow_global_order(loader, rank=0, world_size=2, grad_accum_steps=1, seed=0)
        assert same is loader
        assert reason == expected


def test_a_global_batch_larger_than_the_data_is_an_error():
    with pytest.raises(ConfigError, match=r"4 per process x 2 processes x 8 micro-batches = 64"):
        follow_global_order(_loader(), rank=0, world_size=2, grad_accum_steps=8, seed=0)


RECORDER = '''\
"""Test double: data that records the ids each rank loads; an SGD that saves step 20."""

import atexit
import json
import os

import attrs
import torch
from torch.utils.data import DataLoader, Dataset

import plugtrain
from plugtrain import hookimpl
from plugtrain.schema import arg

RECORD_DIR = os.environ["RECORD_DIR"]
RANK = os.environ.get("RANK", "alone")
LOADED = []


class Recorded(Dataset):
    """Synthetic classification examples; every id loaded is recorded."""

    def __init__(self, num_examples):
        generator = torch.Generator().manual_seed(4)
        self.inputs = torch.randn(num_examples, 16, generator=generator)
        self.labels = (self.inputs @ torch.randn(16, 4, generator=generator)).argmax(dim=1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        LOADED.append(int(index))
        return self.inputs[index], self.labels[index]


def recorded_loader(batch_size, num_examples):
    generator = torch.Generator().manual_seed(21)
    return DataLoader(
        Recorded(num_examples), batch_size=batch_size, shuffle=True, generator=generator
    )


def save_ids():
    with open(os.path.join(RECORD_DIR, f"ids_{RANK}.json"), "w") as out:
        json.dump(LOADED, out)


atexit.register(save_ids)


@attrs.frozen
class RecordedArgs:
    """Recorded synthetic data."""

    batch_size: int = arg(help="per process")
    num_examples: int = arg(help="examples")


@attrs.frozen
class Step20SGDArgs:
    """SGD that saves its parameters after step 20."""

    lr: float = arg(help="learning rate")


def step20_sgd(params, lr):
    optimizer = plugtrain.resolve("optimizer", "SGD")(params, lr=lr, momentum=0.9)
    step = optimizer.step
    count = [0]

    def recorded_step(*args, **kwargs):
        result = step(*args, **kwargs)
        count[0] += 1
        if count[0] == 20:
            weights = [p.detach().clone() for g in optimizer.param_groups for p in g["params"]]
            torch.save(weights, os.path.join(RECORD_DIR, f"weights_{RANK}.pt"))
        return result

    optimizer.step = recorded_step
    return optimizer


@hookimpl
def plugtrain_register_dataloaders(registry):
    registry.register("Recorded", "order_recorder:recorded_loader", schema=RecordedArgs)


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("Step20SGD", "order_recorder:step20_sgd", schema=Step20SGDArgs)
'''

RUN = """\
plugins: {plugins}
trainer:
  init:
    {backend}
    model_dir: {model_dir}
    seed: 5
    model: {{MLP: {{in_features: 16, hidden: 32, out_features: 4}}}}
    optimizer: {{Step20SGD: {{lr: 0.1}}}}
    loop: {{max_steps: {steps}}}
    checkpoint: {{steps: 3}}
  fit:
    train_dataloader: {{Recorded: {{batch_size: {batch}, num_examples: {examples}}}}}
"""

ONE = "device: CPU"
TWO = "backend: {backend_type: CPU, num_processes: 2}"


def _fit(
    tmp_path: Path,
    name: str,
    backend: str,
    batch: int,
    steps: int = 20,
    model_dir: str = "",
    plugins: str = "[order_recorder]",
    ok: bool = True,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run ``plugtrain fit`` in ``tmp_path/name``; its records folder and the process."""
    folder = tmp_path / name
    records = folder / "records"
    records.mkdir(parents=True)
    (folder / "order_recorder.py").write_text(RECORDER)
    run = folder / "run.yaml"
    where = tmp_path / model_dir if model_dir else folder / "model"
    text = RUN.format(
        backend=backend,
        model_dir=where,
        batch=batch,
        examples=NUM_SAMPLES,
        steps=steps,
        plugins=plugins,
    )
    run.write_text(text)
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    environ["RECORD_DIR"] = str(records)
    environ["PYTHONPATH"] = os.pathsep.join([str(folder), environ.get("PYTHONPATH", "")])
    done = run_plugtrain("fit", str(run), cwd=folder, env=environ, timeout=240)
    if ok:
        assert done.returncode == 0, done.stderr[-3000:]
    return records, done


def _chunks(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


@pytest.mark.slow
def test_one_and_two_processes_see_the_same_samples_per_step_and_end_at_the_same_weights(
    tmp_path,
):
    one, _ = _fit(tmp_path, "one", ONE, 16)
    two, _ = _fit(tmp_path, "two", TWO, 8)
    alone = _chunks(json.loads((one / "ids_alone.json").read_text()), 16)
    ranks = [_chunks(json.loads((two / f"ids_{r}.json").read_text()), 8) for r in range(2)]
    assert len(alone) == 20
    together = [first + second for first, second in zip(*ranks, strict=True)]
    assert together == alone
    order = GlobalOrder(NUM_SAMPLES, 16, 1, 1, seed=21, shuffle=True)  # the generator's seed
    assert alone == [order.step_samples(s // 6, s % 6) for s in range(20)]
    expected = torch.load(one / "weights_alone.pt")
    for rank in range(2):
        for mine, theirs in zip(torch.load(two / f"weights_{rank}.pt"), expected, strict=True):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def three_steps_on_one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Steps 1-3 on one process (16 samples a step), checkpointed at 3: the start that a resume
    on 2 processes and a rank unable to load it both take. Read only: see :func:`_copy_of`."""
    root = tmp_path_factory.mktemp("three_steps_on_one")
    _fit(root, "before", ONE, 16, steps=3, model_dir="shared")
    return root


def _copy_of(three_steps: Path, tmp_path: Path) -> Path:
    """The checkpointed model_dir copied to ``tmp_path/shared``; the records of steps 1-3."""
    shutil.copytree(three_steps / "shared", tmp_path / "shared")
    return three_steps / "before" / "records"


def _ids(records: Path) -> list[int]:
    ids: list[int] = []
    for path in sorted(records.glob("ids_*.json")):
        ids.extend(json.loads(path.read_text()))
    return ids


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "then", "said"),
    [
        ((TWO, 8), (ONE, 16), "written by 2 processes, resuming on 1"),
        ((ONE, 16), (TWO, 8), "written by 1 process, resuming on 2"),
    ],
)
def test_a_resume_at_another_world_size_repeats_and_skips_no_sample(
    tmp_path, first, then, said, request
):
    """Steps 1-3 on one world size, 4-6 (the rest of epoch 0) on the other."""
    if first == (ONE, 16):
        before = _copy_of(request.getfixturevalue("three_steps_on_one"), tmp_path)
    else:
        before, _ = _fit(tmp_path, "before", *first, steps=3, model_dir="shared")
    after, done = _fit(tmp_path, "after", *then, steps=6, model_dir="shared")
    assert said in done.stderr
    seen_before, seen_after = _ids(before), _ids(after)
    assert len(seen_before) == len(seen_after) == 48  # no batch replayed to find the place
    order = GlobalOrder(NUM_SAMPLES, 16, 1, 1, seed=21, shuffle=True)
    assert sorted(seen_before + seen_after) == sorted(order.permutation(0)[:96])


def _resumable(tmp_path: Path, steps: int, **loop: Any) -> Any:
    from plugtrain.builtin.models import MLP
    from plugtrain.train.trainer import Trainer

    return Trainer(
        device="CPU",
        model_dir=tmp_path / "model",
        model=lambda: MLP(in_features=64, out_features=10, hidden=8),
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        loop={"max_steps": steps, **loop},
        checkpoint={"steps": 2},
        logging={"log_steps": 1, "progress": False},
        seed=0,
    )


def test_a_resume_with_other_data_or_another_global_batch_is_an_error_naming_both(tmp_path):
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.errors import TrainingError

    _resumable(tmp_path, 2).fit(synthetic_loader(batch_size=4, num_examples=40))
    with pytest.raises(TrainingError) as info:
        _resumable(tmp_path, 4).fit(synthetic_loader(batch_size=4, num_examples=48))
    assert "num_samples 40" in str(info.value)
    assert "num_samples 48" in str(info.value)
    with pytest.raises(TrainingError, match="written with 4 samples per optimizer step, this "):
        _resumable(tmp_path, 4, grad_accum_steps=2).fit(
            synthetic_loader(batch_size=4, num_examples=40)
        )


class _Counting(torch.utils.data.Dataset):
    """A dataset that records every index loaded."""

    def __init__(self, data: Any, loaded: list[int]) -> None:
        self.data, self.loaded = data, loaded

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        self.loaded.append(index)
        return self.data[index]


def _counted(loaded: list[int]) -> DataLoader[Any]:
    from plugtrain.builtin.data import synthetic_loader

    data = synthetic_loader(batch_size=4, num_examples=40).dataset
    generator = torch.Generator().manual_seed(1)
    return DataLoader(_Counting(data, loaded), batch_size=4, shuffle=True, generator=generator)


def test_a_resume_loads_no_batch_to_find_its_place(tmp_path):
    _resumable(tmp_path, 6).fit(_counted([]))
    straight = _resumable(tmp_path / "straight", 8)
    straight.fit(_counted([]))
    loaded: list[int] = []
    resumed = _resumable(tmp_path, 8)
    resumed.fit(_counted(loaded))
    assert len(loaded) == 2 * 4  # steps 7 and 8 only
    for name, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[name]), name


def test_ranks_that_loaded_different_checkpoints_are_named_with_their_files():
    from plugtrain.train.checkpointing.ranks.agreement import disagreement

    def name(step: int) -> str:
        return f"checkpoint_{step}.mdl"

    same = {"step/0": 20.0, "step/1": 20.0, "failed/0": 0.0, "failed/1": 0.0}
    assert disagreement(same, 20.0, name) is None
    fresh = {"step/0": -1.0, "step/1": -1.0, "failed/0": 0.0, "failed/1": 0.0}
    assert disagreement(fresh, -1.0, name) is None
    failed = {"step/0": 20.0, "step/1": -1.0, "failed/0": 0.0, "failed/1": 1.0}
    assert disagreement(failed, 20.0, name) == (
        "the processes did not resume from the same checkpoint, so no step was run: "
        "rank 0: checkpoint_20.mdl (step 20); rank 1: could not load checkpoint_20.mdl (step 20)"
    )
    other = {"step/0": 20.0, "step/1": 12.0, "failed/0": 0.0, "failed/1": 0.0}
    assert "rank 1: checkpoint_12.mdl (step 12)" in disagreement(other, 20.0, name)


@pytest.mark.slow
def test_a_rank_that_cannot_load_rank_0s_checkpoint_stops_every_rank_before_step_1(
    tmp_path, three_steps_on_one
):
    _copy_of(three_steps_on_one, tmp_path)
    folder = tmp_path / "after"
    folder.mkdir()
    (folder / "hidden.py").write_text(HIDE_ON_RANK_1)
    records, done = _fit(
        tmp_path,
        "after",
        TWO,
        8,
        steps=6,
        model_dir="shared",
        plugins="[order_recorder, hidden]",
        ok=False,
    )
    assert done.returncode != 0
    assert (
        "the processes did not resume from the same checkpoint, so no step was run: "
        "rank 0: checkpoint_3.mdl (step 3); rank 1: could not load checkpoint_3.mdl (step 3)"
    ) in done.stderr
    assert _ids(records) == []  # no batch loaded, no step taken
    assert not (tmp_path / "shared" / "checkpoint_6.mdl").exists()


HIDE_ON_RANK_1 = """\
\"\"\"Test double: on rank 1 the checkpoints are not there (a per-node model_dir).\"\"\"

import os

from plugtrain.train.checkpointing.storage.file import FileCheckpointer

if os.environ.get("RANK") == "1":

    def missing(self, path):
        raise FileNotFoundError(f"{path} is not on this node")

    FileCheckpointer.load = missing
"""


def test_the_fingerprint_holds_the_loader_name_and_arguments_but_not_how_it_loads(tmp_path):
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.errors import TrainingError

    first = _resumable(tmp_path, 2)
    first.data_description = {"name": "Synthetic", "arguments": {"batch_size": 4, "seed": 0}}
    first.fit(synthetic_loader(batch_size=4, num_examples=40))
    again = _resumable(tmp_path, 4)  # another number of workers: the same data
    again.data_description = {
        "name": "Synthetic",
        "arguments": {"batch_size": 4, "seed": 0, "num_workers": 2},
    }
    again.fit(synthetic_loader(batch_size=4, num_examples=40))
    assert again.global_step == 4
    other = _resumable(tmp_path, 6)
    other.data_description = {"name": "Synthetic", "arguments": {"batch_size": 4, "seed": 1}}
    with pytest.raises(TrainingError) as info:
        other.fit(synthetic_loader(batch_size=4, num_examples=40))
    assert "arguments {'seed': 0}" in str(info.value)
    assert "arguments {'seed': 1}" in str(info.value)
