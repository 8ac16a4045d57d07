"""Async all-reduces under HVDLITE_OVERLAP (argv[1]): results against float64 references when every rank waits
at once, when one rank waits late, and when no rank waits at all but polls (held work must still run, within
the hold limit)."""
import time

import numpy as np
import pytest

import hvdlite as hvd

pytestmark = [pytest.mark.across_hosts, pytest.mark.sanitize(address=True, thread=True)]


def expected(step, size, n):
    return np.arange(n, dtype=np.float64) * sum(r + 1 + step for r in range(size))


@pytest.mark.ranks(2, 3)
@pytest.mark.parametrize("overlap", [pytest.param(mode, marks=pytest.mark.hvd_env(HVDLITE_OVERLAP=mode))
                                     for mode in ("on", "off")])
@pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20)
def test_async_allreduces_whether_run_at_once_or_held(overlap):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(6):
        n = 10 + step
        handles = [hvd.allreduce_async(np.arange(n, dtype=np.float64) * (rank + 1 + step), name=f"held.{i}",
                                       op=hvd.Sum) for i in range(3)]
        if rank == 0 and step % 2:
            time.sleep(0.05)  # the others wait first; nothing may run before this rank waits (or the limit)
        for h in handles:
            got = hvd.synchronize(h)
            assert np.array_equal(got, expected(step, size, n)), (step, got)
    # Nobody waits: the requests run once they are older than the hold limit (or at once with overlap on).
    handle = hvd.allreduce_async(np.full(4, float(rank)), name="polled", op=hvd.Sum)
    deadline = time.time() + 10
    while not hvd.poll(handle):
        assert time.time() < deadline, "a polled request never ran"
        time.sleep(0.001)
    assert np.array_equal(hvd.synchronize(handle), np.full(4, float(sum(range(size)))))
    hvd.shutdown()
