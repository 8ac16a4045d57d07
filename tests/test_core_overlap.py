"""HVDLITE_OVERLAP: async all-reduces are correct whether they run while ranks compute (on) or are held
until every rank waits (off), and held requests that nobody waits for still run (see core_workers/overlap.py)."""
import os

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "overlap.py")


@pytest.mark.parametrize("overlap", ["on", "off"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_async_allreduces_under_each_overlap_mode(nranks, overlap):
    env = {"HVDLITE_OVERLAP": overlap, "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}
    assert_ran_ok(run_mpi(nranks, WORKER, overlap, env=env), nranks)
