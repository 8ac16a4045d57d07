"""init() with a sub-communicator, process sets given at init, and sets built from communicators."""
import os

from conftest import TESTS_DIR, assert_ran_ok, run_mpi


def test_init_with_communicators_and_process_sets():
    worker = os.path.join(TESTS_DIR, "core_workers", "init_comm.py")
    assert_ran_ok(run_mpi(4, worker), 4)
