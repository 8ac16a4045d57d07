"""The NumPy all-reduces made in C (hvdlite._hotpath, array_collectives.c) on 2 and 3 real MPI ranks: see
core_workers/arrays.py."""
import os

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "arrays.py")


@pytest.mark.parametrize("nranks", [2, 3])
def test_numpy_allreduces_from_c(nranks):
    env = {"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers")}
    assert_ran_ok(run_mpi(nranks, WORKER, env=env), nranks)
