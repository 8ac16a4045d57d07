"""Every collective x dtype x op of the core, on 2, 3 and 4 real MPI ranks, under each all-reduce
algorithm and with fusion or the response cache turned off or tiny (see core_workers/collectives.py); a cache
smaller than a step's tensors warns once, naming the setting."""
import os

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "collectives.py")
WORKER_PATH = {"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers"),
               "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}  # a bug fails fast instead of hanging


@pytest.mark.parametrize("nranks", [2, 3, 4])
@pytest.mark.parametrize("algorithm", ["ring", "mpi", "direct", "auto"])
def test_every_collective_matches_float64_reference(nranks, algorithm):
    env = dict(WORKER_PATH, HVDLITE_ALLREDUCE_ALGORITHM=algorithm, HVDLITE_RING_SEGMENT_BYTES="4096")
    assert_ran_ok(run_mpi(nranks, WORKER, algorithm, env=env), nranks)


def test_collectives_without_fusion_or_cache():
    env = dict(WORKER_PATH, HVDLITE_FUSION_THRESHOLD="0", HVDLITE_CACHE_CAPACITY="0")
    assert_ran_ok(run_mpi(3, WORKER, "no-fusion-no-cache", env=env), 3)


def test_collectives_with_a_cache_smaller_than_the_working_set():
    # Constant eviction: cached bits get reassigned while requests wait on them.
    env = dict(WORKER_PATH, HVDLITE_CACHE_CAPACITY="8", HVDLITE_FUSION_THRESHOLD="65536")
    assert_ran_ok(run_mpi(3, WORKER, "tiny-cache", env=env), 3)


@pytest.mark.parametrize("capacity, warns", [(8, True), (16, False)])
def test_a_cache_smaller_than_a_step_says_so_once(capacity, warns):
    """12 tensors a step, 4 per round: a cache of 8 evicts each before its next use (every rank still gets the
    right sums); rank 0 alone warns, once, with the setting to raise. A cache of 16 holds them: no warning."""
    worker = os.path.join(TESTS_DIR, "core_workers", "cache_thrash.py")
    result = run_mpi(3, worker, 12, env=dict(WORKER_PATH, HVDLITE_CACHE_CAPACITY=str(capacity)))
    assert_ran_ok(result, 3)
    warnings = [line for line in result.stderr.splitlines() if "response cache too small" in line]
    if not warns:
        assert warnings == [], warnings
        return
    assert len(warnings) == 1, result.stderr[-3000:]
    assert warnings[0].startswith("[hvdlite rank 0] WARNING") and "HVDLITE_CACHE_CAPACITY" in warnings[0], warnings
    assert "its 8 entries" in warnings[0] and "'thrash." in warnings[0], warnings
