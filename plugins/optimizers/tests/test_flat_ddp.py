"""``flat=True`` under DistributedDataParallel: two real CPU processes over gloo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import plugtrain

    results = {}
    for flat in (False, True):
        ddp = torch.nn.parallel.DistributedDataParallel(_model())
        opt = plugtrain.optim.AdamW(ddp.parameters(), lr=0.01, weight_decay=0.1, flat=flat)
        gen = torch.Generator().manual_seed(rank)
        inside = True
        for _ in range(4):
            opt.zero_grad()
            x = torch.randn(8, 6, generator=gen)
            ddp(x).pow(2).mean().backward()
            if flat:
                layout = opt._layouts[0]
                grads = layout.base_of([p.grad for p in ddp.parameters()])
                start = grads.data_ptr()
                stop = start + grads.numel() * grads.element_size()
                inside &= all(start <= p.grad.data_ptr() < stop for p in ddp.parameters())
            opt.step()
        results[flat] = [p.detach().clone() for p in ddp.module.parameters()]
        results[f"{flat} inside"] = inside
    torch.save(results, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_flat_layout_under_ddp_matches_the_unflattened_run(tmp_path: Path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "result")
    mp.spawn(_worker, args=(2, port, out), nprocs=2, join=True)
    ranks = [torch.load(f"{out}.{r}") for r in range(2)]
    for result in ranks:
        assert result["True inside"]  # the averaged gradients landed in the flat buffer
        for flat, plain in zip(result[True], result[False], strict=True):
            torch.testing.assert_close(flat, plain, rtol=1e-6, atol=1e-7)
    for a, b in zip(ranks[0][True], ranks[1][True], strict=True):
        assert torch.equal(a, b)  # both ranks took the same steps
