"""Gradients of the differentiable collectives, checked across ranks like torch.autograd.gradcheck.

The job computes y = f(x) where x and y are spread over the ranks. The full Jacobian d(all y)/d(all x) is built
twice: numerically, by perturbing one element of one rank's input at a time (central differences, every rank
running the collective each time), and analytically, by back-propagating a one-hot gradient placed on one
rank's output at a time. Both are gathered on every rank and must agree, up to Horovod's convention for PyTorch
where it differs from the true Jacobian: the backward of allgather and of broadcast averages the incoming
gradients over the ranks (1/size of the true one), that of a Sum or Average reducescatter is size times the true
one.
"""
import pytest
import torch

import hvdlite.torch as hvd
from harness.seeds import rank_generator

pytestmark = pytest.mark.ranks(2, 3)


@pytest.fixture(scope="module", autouse=True)
def started():
    torch.set_num_threads(1)
    hvd.init()


def jacobians(fn, x, eps=1e-6):
    rank, size = hvd.rank(), hvd.size()
    n_in = hvd.allgather_object(x.numel())
    n_out = hvd.allgather_object(fn(x.clone()).numel())
    columns = []
    for r_in in range(size):
        for e in range(n_in[r_in]):
            outs = []
            for sign in (1.0, -1.0):
                xp = x.clone()
                if rank == r_in:
                    xp.view(-1)[e] += sign * eps
                outs.append(fn(xp).detach().reshape(-1))
            columns.append((outs[0] - outs[1]) / (2 * eps))
    numeric_local = torch.stack(columns, dim=1)                        # (my outputs, all inputs)
    rows = []
    for r_out in range(size):
        for k in range(n_out[r_out]):
            xr = x.clone().requires_grad_(True)
            y = fn(xr)
            seed = torch.zeros_like(y)
            if rank == r_out:
                seed.view(-1)[k] = 1.0
            (grad,) = torch.autograd.grad(y, xr, seed)
            rows.append(grad.reshape(-1))
    analytic_local = torch.stack(rows, dim=0)                          # (all outputs, my inputs)
    numeric = torch.cat(hvd.allgather_object(numeric_local), dim=0)
    analytic = torch.cat(hvd.allgather_object(analytic_local), dim=1)
    return numeric, analytic


def gradcheck(checks, label, fn, x, atol=1e-6, convention=1.0):
    """``convention``: the factor Horovod's backward applies to the true Jacobian of ``fn``."""
    numeric, analytic = jacobians(fn, x)
    checks.true(f"{label}: Jacobian is not trivially zero", bool(numeric.abs().sum() > 0))
    checks.close(f"{label}: analytic Jacobian == {convention:g} x numerical Jacobian", analytic,
                 numeric * convention, rtol=1e-5, atol=atol)


def local_input(shape, salt, positive=False):
    g = rank_generator(hvd.rank(), salt)
    x = torch.rand(shape, generator=g, dtype=torch.float64)
    return x + 0.5 if positive else 4 * x - 2


def test_gradients_of_allreduce_match_numerical_jacobians(checks):
    rank, size = hvd.rank(), hvd.size()
    x = local_input((2, 2), 1)
    gradcheck(checks, "allreduce Sum", lambda t: hvd.allreduce(t, op=hvd.Sum), x)
    gradcheck(checks, "allreduce Average scaled", lambda t: hvd.allreduce(t, op=hvd.Average, prescale_factor=0.5,
                                                                     postscale_factor=3.0), x)
    gradcheck(checks, "allreduce Min", lambda t: hvd.allreduce(t, op=hvd.Min), x)
    gradcheck(checks, "allreduce Max scaled", lambda t: hvd.allreduce(t, op=hvd.Max, prescale_factor=2.0), x)
    gradcheck(checks, "allreduce Product", lambda t: hvd.allreduce(t, op=hvd.Product, prescale_factor=1.5),
              local_input((3,), 2, positive=True))
    gradcheck(checks, "allreduce of a non-contiguous view", lambda t: hvd.allreduce(t.t() * t.t(), op=hvd.Sum), x)
    gradcheck(checks, "grouped_allreduce Average",
              lambda t: torch.cat([o.reshape(-1) for o in hvd.grouped_allreduce([t[0], t[1] * 2])]), x)
    gradcheck(checks, "grouped_allreduce Max",
              lambda t: torch.cat([o.reshape(-1) for o in hvd.grouped_allreduce([t[0], t[1]], op=hvd.Max)]), x)


def test_gradients_of_gather_broadcast_match_numerical_jacobians(checks):
    rank, size = hvd.rank(), hvd.size()
    x = local_input((rank + 1, 2), 3)
    gradcheck(checks, "allgather (rows differ by rank)", lambda t: hvd.allgather(t) ** 2, x, convention=1 / size)
    y = local_input((2, 3), 4)
    gradcheck(checks, "grouped_allgather",
              lambda t: torch.cat([o.reshape(-1) for o in hvd.grouped_allgather([t[:1] * 3, t[1:].exp()])]), y,
              convention=1 / size)
    gradcheck(checks, f"broadcast from rank {size - 1}", lambda t: hvd.broadcast(t, size - 1) ** 2, y,
              convention=1 / size)
    gradcheck(checks, "broadcast from rank 0", lambda t: hvd.broadcast(t.sin(), 0), y, convention=1 / size)


def test_gradients_of_alltoall_reducescatter_match_numerical_jacobians(checks):
    rank, size = hvd.rank(), hvd.size()
    splits = [(rank + d) % 3 for d in range(size)]
    x = local_input((sum(splits), 2), 5)
    gradcheck(checks, "alltoall with splits", lambda t: hvd.alltoall(t * t, splits=splits)[0], x)
    gradcheck(checks, "alltoall equal splits", lambda t: hvd.alltoall(t), local_input((size, 2), 6))
    z = local_input((size + 1, 2), 7)
    gradcheck(checks, "reducescatter Sum", lambda t: hvd.reducescatter(t, op=hvd.Sum), z, convention=size)
    gradcheck(checks, "reducescatter Average scaled",
              lambda t: hvd.reducescatter(t, op=hvd.Average, prescale_factor=0.5, postscale_factor=4.0), z,
              convention=size)
    gradcheck(checks, "reducescatter Max", lambda t: hvd.reducescatter(t, op=hvd.Max), z)
    gradcheck(checks, "grouped_reducescatter Sum",
              lambda t: torch.cat([o.reshape(-1) for o in hvd.grouped_reducescatter([t, 2 * t], op=hvd.Sum)]),
              z, convention=size)
