"""DPR under 2-process data parallel (gloo): the other process's contexts are negatives too.

This file is also the worker: ``python -m torch.distributed.run --nproc-per-node 2
test_encoders_dpr_distributed.py OUT`` builds the same ``dpr`` model in both processes, wraps it
in DDP, gives each process half of a global batch (its own ``labels``, indexing its own
contexts), and takes one SGD step. The loss averaged over the processes and the weights after the
step must equal one process taking the whole batch: each question is scored against every
context of the global batch, and the gradients of the gathered rows reach their own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.slow  # one launch of 2 real processes

ENCODER: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_heads": 4,
    "filter_size": 64,
    "max_position_embeddings": 16,
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
}
GLOBAL_BATCH, CONTEXTS, LENGTH, LR = 4, 2, 8, 0.5


def _model() -> Any:
    from plugtrain import get_registry

    torch.manual_seed(7)
    return get_registry().resolve("model", "dpr")(
        q_encoder=ENCODER, ctx_encoder=ENCODER, mutual_information=True
    )


def _batch(rows: slice) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    questions = torch.randint(1, 64, (GLOBAL_BATCH, LENGTH), generator=generator)
    contexts = torch.randint(1, 64, (GLOBAL_BATCH, CONTEXTS, LENGTH), generator=generator)
    local = questions[rows].shape[0]
    return {
        "questions_input_ids": questions[rows],
        "questions_attention_mask": torch.ones_like(questions[rows]),
        "questions_token_type_ids": torch.zeros_like(questions[rows]),
        "ctx_input_ids": contexts[rows],
        "ctx_attention_mask": torch.ones_like(contexts[rows]),
        "ctx_token_type_ids": torch.zeros_like(contexts[rows]),
        "labels": torch.arange(local) * CONTEXTS,
        "context_labels": torch.arange(local),
    }


def _step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss: torch.Tensor = model(batch)["loss"]
    loss.backward()
    optimizer.step()
    return loss.detach()


def main() -> None:
    """One DDP step on this process's half of the global batch (see the module)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    share = GLOBAL_BATCH // world
    model = DistributedDataParallel(_model())
    loss = _step(model, _batch(slice(rank * share, (rank + 1) * share)))
    dist.all_reduce(loss)
    if rank == 0:
        state = {k: v.clone() for k, v in model.module.state_dict().items()}
        torch.save({"loss": loss / world, "state": state}, Path(sys.argv[1]) / "ddp.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The 2-process step's averaged loss and weights."""
    out = tmp_path_factory.mktemp("dpr_distributed")
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*command, "--nproc-per-node=2", __file__, str(out)],
        capture_output=True, text=True, env=environ, cwd=out, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = torch.load(out / "ddp.pt", weights_only=True)
    return result


def test_two_processes_take_the_step_one_process_takes_on_the_whole_batch(
    ddp: dict[str, Any],
) -> None:
    model = _model()
    loss = _step(model, _batch(slice(None)))
    torch.testing.assert_close(ddp["loss"], loss, atol=1e-6, rtol=1e-5)
    alone = model.state_dict()
    assert set(ddp["state"]) == set(alone)
    for name, tensor in alone.items():  # float32 sums in another order: ~1e-5 on the tables
        torch.testing.assert_close(ddp["state"][name], tensor, atol=2e-5, rtol=1e-5, msg=name)
    moved = _model().state_dict()
    assert any(not torch.equal(moved[n], t) for n, t in alone.items())


def test_without_the_gather_the_processes_would_see_other_negatives() -> None:
    model = _model()
    halves = [_batch(slice(0, 2)), _batch(slice(2, 4))]
    with torch.no_grad():
        separate = torch.stack([model(half)["loss"] for half in halves]).mean()
        whole = model(_batch(slice(None)))["loss"]
    assert not torch.allclose(separate, whole, atol=1e-4)


if __name__ == "__main__":
    main()
