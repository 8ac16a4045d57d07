"""Where Horovod's PyTorch API has a convention of its own, hvdlite.torch follows it, checked on every rank against
values computed here independently: the gradients of allgather, broadcast and reducescatter, a refused request
raised as a RuntimeError, broadcast roots
named by global rank in a process set, scale factors on integer tensors, sparse gradients kept sparse, and the
state broadcast of an optimizer with a parameter that takes no gradient.
"""
import numpy as np
import pytest
import torch
import torch.nn as nn

import hvdlite.torch as hvd
from harness.seeds import rank_generator

pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)]


@pytest.fixture(scope="module", autouse=True)
def started():
    torch.set_num_threads(1)
    hvd.init()


def test_no_other_backends_are_built(checks):
    for query in (hvd.ccl_built, hvd.ddl_built, hvd.gloo_built, hvd.nccl_built, hvd.rocm_built):
        checks.true(f"{query.__name__}() is False", query() is False, repr(query()))
    checks.true("mpi_built()", hvd.mpi_built() is True)


def test_gradients_average_over_ranks_for_allgather_and_broadcast(checks):
    rank, size = hvd.rank(), hvd.size()
    rows = [3, 2, 7][:size]
    for dtype in (torch.float32, torch.float64):
        x = torch.full((rows[rank], 4), float(rank), dtype=dtype, requires_grad=True)
        gathered = hvd.allgather(x)
        # Rank r's rows of the incoming gradient hold r, times (1 + this rank) so that ranks send different
        # gradients: the average over ranks of this rank's rows is rank * mean(1 + r).
        incoming = torch.cat([torch.full((n, 4), float(r), dtype=dtype) for r, n in enumerate(rows)])
        gathered.backward(incoming * (1 + rank))
        expected = np.full((rows[rank], 4), rank * np.mean([1 + r for r in range(size)]))
        checks.close(f"allgather grad {dtype}", x.grad, expected, 1e-6, 1e-6)
        for root in range(size):
            y = torch.full((5,), float(rank), dtype=dtype, requires_grad=True)
            hvd.broadcast(y, root).backward(torch.full((5,), float(1 + rank), dtype=dtype))
            mean = np.mean([1 + r for r in range(size)])
            checks.close(f"broadcast grad {dtype} root {root}", y.grad, np.full(5, mean if rank == root else 0.0),
                         1e-6, 1e-6)


def test_reducescatter_gradients_and_per_output_backward_of_a_group(checks):
    size = hvd.size()
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        x = torch.randn(size * 4, 3, generator=rank_generator(hvd.rank(), 1), dtype=torch.float64,
                        requires_grad=True)
        hvd.reducescatter(x, op=op).backward(torch.ones(4, 3, dtype=torch.float64))
        checks.close(f"reducescatter {op} grad", x.grad, np.full((size * 4, 3), factor), 0, 1e-12)
        xs = [torch.randn(size * 4, generator=rank_generator(hvd.rank(), 2 + i), requires_grad=True)
              for i in range(3)]
        for out in hvd.grouped_reducescatter(xs, op=op):  # one backward per output, as Horovod's tests do
            out.backward(torch.ones(4))
        for i, t in enumerate(xs):
            checks.close(f"grouped reducescatter {op} grad {i}", t.grad, np.full(size * 4, factor), 0, 1e-6)


def test_a_refused_request_is_a_runtime_error_as_in_horovod(checks):
    # Adasum is an all-reduce op: Horovod raises RuntimeError; hvdlite's refusal is that and a ValueError, naming
    # the tensor, on every rank, before anything is sent.
    for label, call in (("reducescatter", lambda: hvd.reducescatter(torch.ones(4), op=hvd.Adasum, name="conv.rs")),
                        ("grouped_reducescatter", lambda: hvd.grouped_reducescatter(
                            [torch.ones(4), torch.ones(2)], op=hvd.Adasum, name="conv.grs"))):
        for error_type in (RuntimeError, ValueError):
            checks.raises(f"{label}(op=Adasum) is a {error_type.__name__}", error_type, call,
                          match=["Adasum", "conv."])
    checks.close("the name works afterwards", hvd.reducescatter(torch.ones(hvd.size()), op=hvd.Sum, name="conv.rs"),
                 np.full(1, float(hvd.size())))
    # The collectives along the first dimension take no scalar (min_ndim of their description in the header).
    for label, call in (("allgather", lambda: hvd.allgather(torch.tensor(1.0), name="conv.scalar_ag")),
                        ("alltoall", lambda: hvd.alltoall(torch.tensor(1.0), name="conv.scalar_a2a")),
                        ("reducescatter", lambda: hvd.reducescatter(torch.tensor(1.0), name="conv.scalar_rs"))):
        checks.raises(f"{label} of a scalar", RuntimeError, call, match=["conv.scalar", label, "dimension"])
    checks.close("a collective afterwards", hvd.allgather(torch.ones(1), name="conv.scalar_ag"), np.ones(hvd.size()))


def test_process_set_broadcast_takes_a_global_root(checks):
    rank, size = hvd.rank(), hvd.size()
    members = list(range(1, size))
    ps = hvd.add_process_set(members)
    try:
        if rank in members:
            for root in members:
                got = hvd.broadcast(torch.tensor([rank, 10 * rank]), root, name=f"global.root.{root}", process_set=ps)
                checks.close(f"process set broadcast from global rank {root}", got, [root, 10 * root])
                t = torch.tensor([float(rank)])
                hvd.broadcast_(t, root, process_set=ps)
                checks.close(f"in place from global rank {root}", t, [root])
                obj = hvd.broadcast_object({"from": rank}, root, process_set=ps)
                checks.true(f"broadcast_object from global rank {root}", obj == {"from": root}, str(obj))
    finally:
        hvd.remove_process_set(ps)


def test_scale_factors_on_integer_tensors_apply_in_float64_and_truncate(checks):
    rank, size = hvd.rank(), hvd.size()
    inputs = [torch.tensor([7, -7, 5, 1, 100], dtype=torch.int32) + r for r in range(size)]
    got = hvd.allreduce(inputs[rank], op=hvd.Sum, prescale_factor=0.5, postscale_factor=1.5)
    pre = [np.trunc(t.double().numpy() * 0.5) for t in inputs]
    checks.true("dtype kept", got.dtype == torch.int32, str(got.dtype))
    checks.close("integer Sum scaled", got, np.trunc(np.sum(pre, axis=0) * 1.5))
    got = hvd.allreduce(inputs[rank], op=hvd.Average, postscale_factor=3.0)
    checks.close("integer Average postscaled", got, np.trunc(np.sum([t.double().numpy() for t in inputs], axis=0)
                                                              * 3.0 / size))


def test_sparse_gradients_stay_sparse_for_sparse_adam(checks):
    rank, size = hvd.rank(), hvd.size()
    rows_of = [torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]]), torch.tensor([[1, 3, 4], [4, 7, 9]]),
               torch.tensor([[0, 8], [8, 6]])][:size]
    for sparse_as_dense in (False, True):
        torch.manual_seed(5)
        emb = nn.Embedding(10, 3, sparse=True)
        reference = nn.Embedding(10, 3, sparse=True)
        reference.load_state_dict(emb.state_dict())
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
        ref_opt = torch.optim.SparseAdam(list(reference.parameters()), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            emb(rows_of[rank] * (step + 1) % 10).sum().backward()
            opt.step()
            checks.true(f"sparse_as_dense={sparse_as_dense}: the optimizer gets a sparse gradient",
                        emb.weight.grad.is_sparse)
            # The reference: every rank's gradient, averaged, in float64, applied by a local SparseAdam.
            grads = []
            for r in range(size):
                reference.zero_grad()
                reference(rows_of[r] * (step + 1) % 10).sum().backward()
                grads.append(reference.weight.grad.to_dense().double())
            reference.weight.grad = (sum(grads) / size).float().to_sparse()
            ref_opt.step()
        checks.close(f"sparse_as_dense={sparse_as_dense}: weights match the reference", emb.weight.detach(),
                     reference.weight.detach(), 1e-6, 1e-6)


def test_sparse_allreduce_async_matches_a_dense_allreduce(checks):
    g = rank_generator(hvd.rank(), 9)
    dense = [torch.rand(n, 10, generator=g) for n in (17, 32, 5)]
    for t in dense:
        t[t < 0.8] = 0
    for op in (hvd.Average, hvd.Sum):
        waits = [hvd.sparse_allreduce_async(t.to_sparse(), op=op, name=f"sparse.{op}.{i}") for i, t in enumerate(dense)]
        for i, (t, wait) in enumerate(zip(dense, waits)):
            got = wait()
            checks.true(f"sparse result {i} is sparse", got.is_sparse)
            checks.close(f"sparse allreduce {op} {i}", got.to_dense(), hvd.allreduce(t, op=op), 1e-6, 1e-6)


def test_sparse_allreduce_async_returns_a_work_that_is_also_callable(checks):
    """The callable is a Work (hvdlite/work.py) as well: waited, read and released by the protocol's calls."""
    t = torch.zeros(6, 3)
    t[hvd.rank(), 1] = 1.0 + hvd.rank()
    work = hvd.sparse_allreduce_async(t.to_sparse(), op=hvd.Sum, name="sparse.work")
    work.wait()
    checks.true("done after wait", work.poll())
    checks.true("no exception", work.exception() is None)
    checks.close("its result", work.result().to_dense(), hvd.allreduce(t, op=hvd.Sum), 0, 0)
    work.release()


def test_broadcast_optimizer_state_with_a_parameter_that_takes_no_gradient(checks):
    class IndexedScale(nn.Module):
        def __init__(self):
            super().__init__()
            self.index = nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
            self.scale = nn.Parameter(torch.rand(4) + hvd.rank())

        def forward(self, x):
            return torch.index_select(self.scale, 0, self.index.long()) * x

    model = IndexedScale()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-6,
                                                         momentum=0.9, nesterov=True),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = model.scale.detach().clone()
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    checks.true("no gradient for the frozen parameter", model.index.grad is None)
    checks.close("a zero gradient for the trainable one", model.scale.grad, np.zeros(4))
    checks.close("the parameters did not move", model.scale.detach(), before)
    checks.close("and are the root's", hvd.broadcast(model.scale.detach(), 0), model.scale.detach())
    model(torch.ones(2)).sum().backward()
    optimizer.step()
    checks.close("training goes on identically on every rank", hvd.allreduce(model.scale.detach(), op=hvd.Max),
                 model.scale.detach())
