"""Quiet and wake: ranks stop negotiating while none has work, and the first to get work wakes the others (each
wake received from its named sender). Hundreds of quiet/wake cycles, ranks pausing at random so that any of them,
or several at once, wake the rest, with async work in flight. make test runs it across simulated hosts too, on
both of MPICH's network layers: over UCX a wake received from any source was lost and hung every such run. A rank
quiet for a while rests (its thread wakes far less often than once a cycle) and is still woken by a peer."""
import random
import time

import numpy as np
import pytest

import hvdlite as hvd
from hvdlite.testing import core_threads

pytestmark = [pytest.mark.ranks(2, 3, 4), pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),
              pytest.mark.across_hosts, pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


@pytest.mark.timeout(120)
def test_hundreds_of_quiet_and_wake_cycles_complete():
    rank, size = hvd.rank(), hvd.size()
    pauses = random.Random(7919 * (rank + 1))  # each rank its own pauses: a different rank wakes each time
    expected = size * (size + 1) / 2
    for step in range(400):
        # Longer than a cycle: every rank goes quiet while one of them is still away.
        time.sleep(pauses.choice([0, 0, 0.001, 0.002, 0.004]))
        handles = [hvd.allreduce_async(np.full(16, rank + 1.0), name=f"wake.{j}", op=hvd.Sum) for j in range(2)]
        for handle in handles:
            out = hvd.synchronize(handle)
            assert np.all(out == expected), f"step {step}: {out[:4]}, expected {expected}"


@pytest.mark.timeout(120)
def test_every_rank_waking_at_once():
    rank, size = hvd.rank(), hvd.size()
    for step in range(100):
        time.sleep(0.003)  # all quiet, then all wake together: every rank receives a wake from every other
        out = hvd.allreduce(np.full(8, float(step + rank)), name="together", op=hvd.Sum)
        assert np.all(out == size * step + size * (size - 1) / 2), f"step {step}: {out[:4]}"


@pytest.mark.timeout(120)
@pytest.mark.hvd_env(HVDLITE_OVERLAP="on")  # rounds on every cycle (with few cores an idle rank keeps a heartbeat)
def test_ranks_quiet_for_long_rest_and_are_still_woken_by_a_peer():
    rank, size = hvd.rank(), hvd.size()
    hvd.allreduce(np.ones(4), name="rest.start", op=hvd.Sum)
    time.sleep(0.3)  # its rests have grown to their longest by now (quiet_wake.h)
    before = core_threads.switches()
    time.sleep(1.0)
    woken = core_threads.switches() - before
    # Looking every cycle (1 ms) woke the thread about 1000 times a second.
    assert woken < 300, f"rank {rank}: hvdlite's thread woke {woken} times in a second while no rank had work"
    for step in range(2 * size):
        # Every rank rests; the step's waker comes back first, and the others only after its wake reached them.
        time.sleep(0.15 if rank == step % size else 0.2)
        out = hvd.allreduce(np.full(8, float(step * size + rank)), name="rest.wake", op=hvd.Sum)
        assert np.all(out == step * size * size + size * (size - 1) / 2), f"step {step}: {out[:4]}"


@pytest.mark.timeout(120)
@pytest.mark.hvd_env(HVDLITE_OVERLAP="on")
def test_resting_ranks_without_work_take_part_in_the_others_rounds():
    # Every round is the whole job's, so a rank with nothing of its own must still wake for its peers' work: here
    # rank 0 is outside the process set, then the rank that joined first waits in join while the others go on.
    rank, size = hvd.rank(), hvd.size()
    members = list(range(1, size))
    ps = hvd.add_process_set(members)
    for step in range(4):
        time.sleep(0.05)  # every rank rests
        if ps.included():
            got = hvd.allreduce(np.full(3, float(rank + step)), op=hvd.Sum, name="rest.set", process_set=ps)
            assert np.all(got == sum(members) + step * len(members)), f"step {step}: {got}"
    hvd.barrier()
    assert hvd.remove_process_set(ps)
    for step in range(rank + 1):  # rank r takes r + 1 steps: the ranks join one after another
        time.sleep(0.05)
        got = hvd.allreduce(np.full(3, 1.0), op=hvd.Sum, name="rest.join")
        assert np.all(got == size - step), f"step {step}: {got}"  # the joined ranks give nothing to the sum
    assert hvd.join() == size - 1
