"""The per-tensor calls made in C (hvdlite._hotpath) on 2 and 3 real MPI ranks: see core_workers/hotpath.py."""
import os

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "hotpath.py")


@pytest.mark.parametrize("nranks", [2, 3])
def test_prepared_requests_handles_and_refusals(nranks):
    env = {"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers"), "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}
    assert_ran_ok(run_mpi(nranks, WORKER, env=env), nranks)
