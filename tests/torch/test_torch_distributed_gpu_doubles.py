"""The torch.distributed backend's path for CUDA tensors, on a machine without a GPU: the backend's TEST DOUBLE switch
makes CPU tensors take that path (requests marked as GPU memory of device 0 on a stream of the CUDA double,
caller-allocated outputs for all-gathers and all-to-alls, their rows agreed beforehand), and the CUDA and NCCL
doubles (tests/gpu/doubles: host memory as device memory) run the core's NCCL path. Each collective is checked
on every rank against a float64 reference, and the NCCL double's call count shows the NCCL path ran it. What this
cannot show: PyTorch's CUDA streams, events and caching allocator around it, which only tests/gpu/run.sh on a GPU
checks (its DDP on hvdlite against DDP on NCCL).
"""
import pytest
import torch
import torch.distributed as dist

import hvdlite as hvd
import hvdlite.torch  # noqa: F401  (registers the backend)
from harness.checks import assert_raises
from harness.gpu_doubles import ENV, build, doubles
from harness.multirank import job_size

if job_size() is None:
    build()

pytestmark = [pytest.mark.ranks(2, 3), pytest.mark.hvd_env(**ENV)]


@pytest.fixture(scope="module", autouse=True)
def process_group():
    from hvdlite import gpu
    from hvdlite.torch.distributed import extension
    torch.set_num_threads(1)
    hvd.init()
    assert gpu.collectives_available(), gpu.gpu_status()
    dist.init_process_group("hvdlite")
    extension.load().use_gpu_doubles(doubles().stream())
    yield
    extension.load().use_gpu_doubles(0)
    dist.barrier()  # no rank shuts the core down while another still has a message to receive
    dist.destroy_process_group()


def nccl_calls():
    return doubles().nccl.fake_nccl_calls()


def on_nccl(call):
    """Runs call() and checks that it went through the NCCL double."""
    before = nccl_calls()
    result = call()
    assert nccl_calls() > before, "the collective did not go through NCCL"
    return result


def mine(rank, shape=(5, 3), dtype=torch.float64):
    return (torch.arange(torch.Size(shape).numel(), dtype=torch.float64).view(shape) + 10 * rank).to(dtype)


def test_all_reduce_ops_broadcast_and_reduce():
    rank, size = dist.get_rank(), dist.get_world_size()
    everyone = torch.stack([mine(r) for r in range(size)])
    for op, want in ((dist.ReduceOp.SUM, everyone.sum(0)), (dist.ReduceOp.AVG, everyone.mean(0)),
                     (dist.ReduceOp.MAX, everyone.amax(0)), (dist.ReduceOp.MIN, everyone.amin(0))):
        x = mine(rank, dtype=torch.float32)
        on_nccl(lambda: dist.all_reduce(x, op=op))
        torch.testing.assert_close(x.double(), want, rtol=1e-6, atol=1e-5, msg=f"all_reduce {op}")
    x = mine(rank)
    on_nccl(lambda: dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5)))
    torch.testing.assert_close(x, everyone.sum(0) * 0.5, rtol=1e-12, atol=0)
    strided = mine(rank).t()  # not contiguous: reduced in a copy, written back
    on_nccl(lambda: dist.all_reduce(strided))
    torch.testing.assert_close(strided, everyone.sum(0).t(), rtol=1e-12, atol=0)
    flags = torch.tensor([rank % 2, 1, 0], dtype=torch.int32)  # bitwise: gathered, reduced here
    on_nccl(lambda: dist.all_reduce(flags, op=dist.ReduceOp.BOR))
    assert flags.tolist() == [1 if size > 1 else 0, 1, 0]
    y = torch.full((4,), float(rank)).t()
    on_nccl(lambda: dist.broadcast(y, src=size - 1))
    assert y.tolist() == [float(size - 1)] * 4
    z = mine(rank)
    on_nccl(lambda: dist.reduce(z, dst=0))
    torch.testing.assert_close(z, everyone.sum(0) if rank == 0 else mine(rank), rtol=1e-12, atol=0)


def test_gathers_and_reduce_scatters():
    rank, size = dist.get_rank(), dist.get_world_size()
    outs = [torch.empty(5, 3, dtype=torch.float64) for _ in range(size)]
    on_nccl(lambda: dist.all_gather(outs, mine(rank)))
    for r in range(size):
        assert torch.equal(outs[r], mine(r))
    flat = torch.empty(size * 5, 3, dtype=torch.float64)
    on_nccl(lambda: dist.all_gather_into_tensor(flat, mine(rank)))
    assert torch.equal(flat, torch.cat([mine(r) for r in range(size)]))
    everyone = torch.stack([mine(r, (size * 2, 3)) for r in range(size)]).sum(0)
    out = torch.empty(2, 3, dtype=torch.float64)
    on_nccl(lambda: dist.reduce_scatter_tensor(out, mine(rank, (size * 2, 3))))
    assert torch.equal(out, everyone[2 * rank:2 * rank + 2])
    pieces = list(mine(rank, (size * 2, 3)).chunk(size))
    out = torch.empty(2, 3, dtype=torch.float64)
    on_nccl(lambda: dist.reduce_scatter(out, pieces))
    assert torch.equal(out, everyone[2 * rank:2 * rank + 2])


def test_all_to_all_with_splits_scatter_and_point_to_point():
    rank, size = dist.get_rank(), dist.get_world_size()
    # Rank r sends r + d + 1 rows to rank d; every rank's rows are numbered by sender and destination.
    send = torch.cat([torch.full((rank + d + 1, 2), float(100 * rank + d)) for d in range(size)])
    received = torch.empty(sum(s + rank + 1 for s in range(size)), 2)
    on_nccl(lambda: dist.all_to_all_single(received, send, [s + rank + 1 for s in range(size)],
                                           [rank + d + 1 for d in range(size)]))
    assert torch.equal(received, torch.cat([torch.full((s + rank + 1, 2), float(100 * s + rank))
                                            for s in range(size)]))
    outs = [torch.empty(3) for _ in range(size)]
    on_nccl(lambda: dist.all_to_all(outs, [torch.full((3,), float(10 * rank + d)) for d in range(size)]))
    assert [o.tolist() for o in outs] == [[float(10 * s + rank)] * 3 for s in range(size)]
    piece = torch.empty(4)
    sources = [torch.full((4,), float(d)) for d in range(size)] if rank == 0 else None
    on_nccl(lambda: dist.scatter(piece, sources, src=0))
    assert piece.tolist() == [float(rank)] * 4
    message = torch.full((6,), float(rank + 1))
    if rank == 0:
        dist.send(message, dst=1)  # buffered: it goes when the receiver takes it
    elif rank == 1:
        on_nccl(lambda: dist.recv(message, src=0))
        assert message.tolist() == [1.0] * 6
    dist.barrier()


def test_a_group_of_some_ranks():
    rank, size = dist.get_rank(), dist.get_world_size()
    members = list(range(1, size))  # all but rank 0: its own process set, and NCCL communicator
    group = dist.new_group(members)
    if rank in members:
        x = mine(rank)
        on_nccl(lambda: dist.all_reduce(x, group=group))
        torch.testing.assert_close(x, sum(mine(r) for r in members), rtol=1e-12, atol=0)
        outs = [torch.empty(5, 3, dtype=torch.float64) for _ in members]
        on_nccl(lambda: dist.all_gather(outs, mine(rank), group=group))
        assert all(torch.equal(o, mine(r)) for o, r in zip(outs, members))
    dist.barrier()


def test_async_works_and_their_futures():
    rank, size = dist.get_rank(), dist.get_world_size()
    xs = [mine(rank, (7,)) for _ in range(3)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    futures = [w.get_future() for w in works]
    for w, f, x in zip(works, futures, xs):
        assert w.wait()
        f.wait()
        assert w.is_completed() and w.exception() is None
        torch.testing.assert_close(x, sum(mine(r, (7,)) for r in range(size)), rtol=1e-12, atol=0)


def test_a_mismatch_is_an_error_on_every_rank_not_a_write_past_the_output():
    rank, size = dist.get_rank(), dist.get_world_size()
    if size == 1:
        return
    # All-to-all: rank 0 sends rank 1 one row more than rank 1 has room for.
    send = torch.ones(size + (1 if rank == 0 else 0), 2)
    splits = [1] * size
    if rank == 0:
        splits[1] = 2
    assert_raises(ValueError, dist.all_to_all_single, torch.empty(size, 2), send, [1] * size, splits,
                  match=["all_to_all_single of CUDA tensors: rank 0 sends 2 rows to rank 1, whose output has room "
                         "for 1 from it"])
    # All-gather: rank 0 sends more elements than the outputs have room for (a check no rank can make alone).
    assert_raises(RuntimeError, dist.all_gather, [torch.empty(3) for _ in range(size)],
                  torch.ones(4 if rank == 0 else 3), match=["allgather", "rank 0 sent [1, 4]"])


def test_ddp_trains_to_the_parameters_of_one_process_on_every_rank():
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    reference.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    batches = [torch.Generator().manual_seed(100 * step + r) for step in range(4) for r in range(size)]
    for step in range(4):
        xs = [torch.randn(4, 6, generator=batches[step * size + r], dtype=torch.float64) for r in range(size)]
        opt.zero_grad()
        before = nccl_calls()
        ddp(xs[rank]).pow(2).sum().backward()
        assert nccl_calls() > before
        opt.step()
        ref_opt.zero_grad()
        (sum(reference(x).pow(2).sum() for x in xs) / size).backward()
        ref_opt.step()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
