"""A 2-D DeviceMesh on the "hvdlite" backend, 4 ranks: each dimension's groups (made by torch on their members only)
reduce within themselves, and FSDP2 over one dimension with all-reduce over the other (HSDP) trains as the float64
single-process run. Each result is checked on every rank against a reference built from every rank's input."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import hvdlite.torch  # noqa: F401  (registers the backend)

pytestmark = [pytest.mark.ranks(4),
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=60),
              pytest.mark.across_hosts]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    torch.set_num_threads(1)
    dist.init_process_group("hvdlite")
    yield
    dist.barrier()
    dist.destroy_process_group()


def test_each_dimension_reduces_within_its_groups(checks):
    from torch.distributed.device_mesh import init_device_mesh
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    layout = torch.arange(4).view(2, 2)  # rank r sits at (r // 2, r % 2)
    for dim, name in enumerate(("replicate", "shard")):
        group = mesh[name].get_group()
        peers = layout.select(1 - dim, (rank % 2) if dim == 0 else (rank // 2)).tolist()
        x = torch.full((3,), float(rank) + 0.5)
        dist.all_reduce(x, group=group)
        want = sum(p + 0.5 for p in peers)
        checks.true(f"all_reduce over mesh dimension {name} (ranks {peers})", torch.equal(x, torch.full((3,), want)),
                    f"{x.tolist()} != {want}")
        gathered = [torch.empty(1) for _ in peers]
        dist.all_gather(gathered, torch.tensor([float(rank)]), group=group)
        checks.true(f"all_gather over {name}", [int(t.item()) for t in gathered] == peers, str(gathered))


def test_hybrid_sharded_training_matches_float64(checks):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    size, rank = dist.get_world_size(), dist.get_rank()

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))

    def batch(r, step):
        g = torch.Generator().manual_seed(100 * step + r)
        return torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)

    net = model()
    for layer in net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(4):
        opt.zero_grad()
        x, y = batch(rank, step)
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    got = torch.cat([p.full_tensor().reshape(-1).double() for p in net.parameters()])

    reference = model().double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(4):
        ref_opt.zero_grad()
        for r in range(size):
            x, y = batch(r, step)
            (nn.functional.cross_entropy(reference(x.double()), y) / size).backward()
        ref_opt.step()
    want = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    checks.close("HSDP (FSDP2 on a 2-D mesh) vs float64", got, want, rtol=1e-4, atol=1e-5)
