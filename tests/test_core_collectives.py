"""Every collective x dtype x op of the core, on 2, 3 and 4 real MPI ranks, under each all-reduce
algorithm and with fusion or the response cache turned off or tiny (see core_workers/collectives.py)."""
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
