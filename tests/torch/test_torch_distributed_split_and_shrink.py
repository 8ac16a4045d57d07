"""split_group and shrink_group on the "hvdlite" backend, 3 ranks: each new group is made on its members alone (the
core's process set of members), reduces and gathers within itself (checked on every rank against a reference built
from every rank's input), and a shrunk default group carries on without the excluded rank, which only waits.

torch 2.13 offers split_group only where an accelerator is present (it asks torch.accelerator for the parent's
backend, and wants the default group bound to a device). The split test is a test double of that query alone,
labelled as such: torch.accelerator names the CPU and the default group is bound to cpu:0, so that torch's real
split path (ProcessGroup::splitGroup, which splits every backend of the group) reaches hvdlite's backend as it does
in a job bound to a GPU whose CPU tensors go through hvdlite ("cpu:hvdlite,cuda:nccl").
"""
import pytest
import torch
import torch.distributed as dist

import hvdlite.torch as hvd
from harness.reference import reduce_reference
from harness.seeds import rank_generator

pytestmark = [pytest.mark.ranks(3),
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    torch.set_num_threads(1)
    dist.init_process_group("hvdlite")
    yield
    dist.destroy_process_group()


def make(rank, salt):
    return torch.rand((5,), generator=rank_generator(rank, salt), dtype=torch.float64)


def test_split_group_makes_a_group_of_each_split_on_its_members(checks):
    rank = dist.get_rank()
    splits = [[0, 2], [1]]
    available, current = torch.accelerator.is_available, torch.accelerator.current_accelerator
    torch.accelerator.is_available = lambda: True  # the test double described above
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("cpu")
    default = dist.distributed_c10d._get_default_group()
    default.bound_device_id = torch.device("cpu", 0)
    try:
        group = dist.split_group(split_ranks=splits,
                                 pg_options=torch._C._distributed_c10d.Backend.Options("hvdlite"))
    finally:
        torch.accelerator.is_available, torch.accelerator.current_accelerator = available, current
    members = next(split for split in splits if rank in split)
    checks.true("the split group's ranks", dist.get_process_group_ranks(group) == members,
                str(dist.get_process_group_ranks(group)))
    checks.true("this rank's place in it", (dist.get_rank(group), dist.get_world_size(group)) ==
                (members.index(rank), len(members)))
    x = make(rank, 11).clone()
    dist.all_reduce(x, group=group)
    checks.close("all_reduce on the split group", x, reduce_reference([make(r, 11) for r in members], "sum"),
                 1e-12, 1e-12)
    gathered = [torch.empty(1) for _ in members]
    dist.all_gather(gathered, torch.tensor([float(rank)]), group=group)
    checks.true("all_gather on the split group", [int(t.item()) for t in gathered] == members, str(gathered))
    dist.destroy_process_group(group)


def test_shrink_group_leaves_the_excluded_rank_out_of_the_default_group(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    kept = list(range(size - 1))
    if rank in kept:  # the excluded rank does not call shrink_group
        shrunk = dist.shrink_group([size - 1])
        checks.true("the shrunk group is the default group", dist.get_world_size() == len(kept)
                    and dist.get_rank() == rank and shrunk.size() == len(kept))
        x = make(rank, 12).clone()
        dist.all_reduce(x)
        checks.close("all_reduce on the shrunk default group", x,
                     reduce_reference([make(r, 12) for r in kept], "sum"), 1e-12, 1e-12)
        work = dist.all_reduce(torch.ones(2), async_op=True)
        checks.true("async work on the shrunk group", work.wait() and work.is_completed())
    # Every rank's core still runs the job's global set: the excluded rank waits here for the others.
    total = hvd.allreduce(torch.ones(1), name="shrink.done", op=hvd.Sum)
    checks.true("every rank got to the end", total.item() == size)
