"""One torch.distributed job's checks, run on every rank however the ranks were started: torch's rank and size are
the MPI job's; an all_reduce equals the float64 sum of every rank's inputs; DDP's parameters after 4 steps equal those
of one process training on every rank's batches. Each rank writes what it saw (rank, size, host, local rank and
size) to OUT/rank<r>.json. Run as ``python one_job.py OUT`` under torchrun (or any launcher that sets torch's
variables), or imported for check_job (torch.multiprocessing.spawn's workers)."""
import json
import os
import socket
import sys

import torch
import torch.distributed as dist

import hvdlite.torch as hvd


def check_job(out):
    rank, size = dist.get_rank(), dist.get_world_size()
    assert (hvd.rank(), hvd.size()) == (rank, size), (hvd.rank(), hvd.size(), rank, size)

    def inputs(r):
        return torch.arange(1000, dtype=torch.float64) * (r + 1) + 0.5 * r
    x = inputs(rank)
    dist.all_reduce(x)
    assert torch.equal(x, sum(inputs(r) for r in range(size))), x[:4]

    def batch(step, r):
        return torch.randn(8, 16, generator=torch.Generator().manual_seed(100 * step + r), dtype=torch.float64)
    torch.manual_seed(0)
    reference = torch.nn.Linear(16, 4).double()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4).double())
    model.module.load_state_dict(reference.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(4):
        optimizer.zero_grad()
        model(batch(step, rank)).pow(2).mean().backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        (sum(reference(batch(step, r)).pow(2).mean() for r in range(size)) / size).backward()
        reference_optimizer.step()
    for trained, expected in zip(model.module.parameters(), reference.parameters()):
        assert torch.allclose(trained, expected, rtol=0, atol=1e-12), (trained - expected).abs().max()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "size": size, "host": socket.gethostname(), "local_rank": hvd.local_rank(),
                   "local_size": hvd.local_size()}, f)


if __name__ == "__main__":
    dist.init_process_group("hvdlite")
    check_job(sys.argv[1])
    dist.destroy_process_group()
