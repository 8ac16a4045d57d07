"""Ranks submit the same collectives in orders no two ranks share, step after step, as a training loop's gradients
become ready in whatever order each rank's backward pass finishes them: all-reduces of every op (small ones that
ride in the negotiation round, fused batches, ones large enough for the ring), all-gathers of rank-dependent rows
and broadcasts from a changing root, some tensors only in some steps, some waited for in the middle of a step.
Every result on every rank equals a float64 reference, with the default response cache, one too small for a step
(entries evicted and renegotiated while others are cached), and rounds carried in all-reduces. A tensor that some
ranks never submit fails on the ranks that did, naming the missing ranks, while everything else of that step
completes and the next step runs.

At 2, 3 and 4 ranks, and across simulated hosts (make test-across-hosts: 2x2 and 2x1); at 16 ranks in make check-long.
"""
from collections import namedtuple

import numpy as np
import pytest
from mpi4py import MPI

import hvdlite as hvd
from harness.reference import check_close, np_dtype, rank_input, reduce_reference
from harness.seeds import seed_of

STEPS = 10
# Rounds carried in all-reduces (test_core_carried_rounds.py), with async work run as it comes so that they ride often.
# Not rerun across hosts, where auto carries them in the other cases already.
CARRIED = pytest.mark.hvd_env(HVDLITE_CARRIED_ROUNDS="on", HVDLITE_OVERLAP="on")
ACROSS_HOSTS = pytest.mark.across_hosts
# One collective of the catalogue: op is an all-reduce's (None for the others); optional ones run in some steps only.
Item = namedtuple("Item", "name kind dtype shape op optional")
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max}
# At 16 ranks a job takes minutes on 2 cores: make check-long. Not past 16: with 16 ranks to a core, ranks wait
# descheduled for longer than the short stall shutdown below, and the stall check fails their tensors as missing.
pytestmark = [pytest.mark.ranks(3, 2, 4), pytest.mark.at_scale(check_long=True, up_to=16),
              # A cached request older than half the stall check goes the slow way (so the coordinator can name the
              # missing ranks): with a short check, a slow rank's requests take both ways within one run.
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=2, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=4)]


def catalogue():
    """The collectives a step may run (Items), the same on every rank."""
    rng = np.random.default_rng(seed_of("random orders catalogue"))
    items = []
    for i in range(36):
        kind = rng.choice(["allreduce"] * 6 + ["allgather", "broadcast"])
        dtype = str(rng.choice(["float32", "float32", "float64", "int32", "bfloat16"]))
        # Log-uniform from 1 element to about a megabyte: eager, fused and ring sizes in one step.
        count = int(np.exp(rng.uniform(0, np.log(250_000))))
        shape = (count,) if kind != "allgather" else (1 + count // 64, min(count, 64))
        op = str(rng.choice(list(OPS))) if kind == "allreduce" else None
        items.append(Item(f"t{i}.{kind}", kind, dtype, shape, op, bool(rng.random() < 0.25)))
    return items


def step_plan(items, step, size):
    """What every rank agrees a step runs: the tensors (optional ones in some steps), broadcast roots, and the
    phases the step is cut into (ranks wait for some of a phase's results before the next phase)."""
    rng = np.random.default_rng(seed_of("random orders step", step))
    chosen = [item for item in items if not item.optional or rng.random() < 0.5]
    roots = {item.name: int(rng.integers(size)) for item in chosen if item.kind == "broadcast"}
    cuts = sorted(rng.choice(np.arange(1, len(chosen)), size=2, replace=False))
    return chosen, roots, np.split(np.arange(len(chosen)), cuts)


def contribution(item, rank, step):
    shape = item.shape
    if item.kind == "allgather":  # ranks give different row counts
        shape = (shape[0] + rank % 3,) + shape[1:]
    return rank_input(item.dtype, shape, rank, item.op or "sum", seed=(item.name, step))


def expected(item, roots, size, step):
    if item.kind == "allreduce":
        return reduce_reference([contribution(item, r, step) for r in range(size)], item.op)
    if item.kind == "allgather":
        return np.concatenate([contribution(item, r, step).astype(np.float64) for r in range(size)])
    return contribution(item, roots[item.name], step).astype(np.float64)


def submit(item, roots, rank, step):
    tensor = contribution(item, rank, step)
    if item.kind == "allreduce":
        return hvd.allreduce_async(tensor, name=item.name, op=OPS[item.op])
    if item.kind == "allgather":
        return hvd.allgather_async(tensor, name=item.name)
    return hvd.broadcast_async(tensor, roots[item.name], name=item.name)


def check(item, got, roots, size, step):
    want = expected(item, roots, size, step)
    assert got.shape == want.shape and got.dtype == np_dtype(item.dtype), (item.name, step, got.shape, want.shape,
                                                                            got.dtype)
    check_close(item.name, np.asarray(got), want, item.dtype, f"step {step}, rank {hvd.rank()}:")


def run_step(items, step, skip=(), hold=()):
    """One step in this rank's own order, leaving out the tensors named in `skip`; returns (item, handle) by name
    of those named in `hold`, submitted and not waited for."""
    rank, size = hvd.rank(), hvd.size()
    chosen, roots, phases = step_plan(items, step, size)
    mine = np.random.default_rng(seed_of("random orders rank", rank, step))  # this rank's order alone
    pending = {}
    for phase in phases:
        for index in mine.permutation(phase):
            item = chosen[index]
            if item.name not in skip:
                pending[item.name] = (item, submit(item, roots, rank, step))
        # Some of the phase's results before the next phase's submissions: rounds where the other ranks are
        # still behind, or already ahead.
        waited = [chosen[i].name for i in phase if chosen[i].name in pending and mine.random() < 0.3]
        for name in (n for n in waited if n not in hold):
            item, handle = pending.pop(name)
            check(item, hvd.synchronize(handle), roots, size, step)
    for name in (n for n in mine.permutation(sorted(pending)) if n not in hold):
        item, handle = pending.pop(name)
        check(item, hvd.synchronize(handle), roots, size, step)
    return pending


@pytest.mark.parametrize("setting", [
    pytest.param(None, marks=ACROSS_HOSTS, id="default cache"),
    pytest.param(16, marks=[pytest.mark.hvd_env(HVDLITE_CACHE_CAPACITY=16), ACROSS_HOSTS],
                 id="cache smaller than a step"),
    pytest.param("carried", marks=CARRIED, id="rounds carried in all-reduces")])
def test_random_orders_give_every_rank_the_reference_results(setting):
    hvd.init()
    items = catalogue()
    for step in range(STEPS):
        assert run_step(items, step) == {}
    hvd.shutdown()


@pytest.mark.parametrize("setting", [pytest.param(None, marks=ACROSS_HOSTS, id="default"),
                                     pytest.param("carried", marks=CARRIED, id="rounds carried in all-reduces")])
def test_a_tensor_some_ranks_skip_fails_where_submitted_and_the_rest_completes(setting):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    items = catalogue()
    for step in range(3):  # the step's tensors cached
        run_step(items, step)
    # Step 3: a tensor of every step that some ranks (not all) skip, each rank still in its own order.
    chosen, _, _ = step_plan(items, 3, size)
    rng = np.random.default_rng(seed_of("random orders skip"))
    skipped = str(rng.choice([item.name for item in chosen if item.kind == "allreduce" and not item.optional]))
    skippers = sorted(int(r) for r in rng.choice(size, size=max(1, size // 2), replace=False))
    skipping = rank in skippers
    left = run_step(items, 3, skip={skipped} if skipping else (), hold=() if skipping else {skipped})
    if skipping:
        assert left == {}
    else:
        _, handle = left.pop(skipped)
        with pytest.raises(hvd.HvdliteError) as failure:
            hvd.synchronize(handle)
        message = str(failure.value)
        assert "Stalled" in message and f"'{skipped}'" in message, message
        assert str(skippers).replace(" ", "") in message.replace(" ", ""), (skippers, message)
    # Every rank past the failure before anyone submits the name again (a later submission would pair with it).
    MPI.COMM_WORLD.Barrier()
    for step in range(4, 6):
        assert run_step(items, step) == {}
    hvd.shutdown()
