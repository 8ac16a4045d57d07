"""init() with a sub-communicator, process sets given at init, and sets built from communicators."""
import os

from conftest import TESTS_DIR, assert_ran_ok, run_mpi


def test_init_with_communicators_and_process_sets():
    worker = os.path.join(TESTS_DIR, "core_workers", "init_comm.py")
    assert_ran_ok(run_mpi(4, worker), 4)


def test_unnamed_collectives_on_a_process_set_leave_global_names_aligned(tmp_path):
    # Generated names are counted per process set: ranks outside a set must not fall out of step.
    script = tmp_path / "names.py"
    script.write_text(
        "import numpy as np, hvdlite as hvd\n"
        "hvd.init()\n"
        "ps = hvd.add_process_set([1])\n"
        "if hvd.rank() == 1:\n"
        "    hvd.allreduce(np.ones(1), process_set=ps)\n"
        "    hvd.broadcast_object(1, root_rank=0, process_set=ps)\n"
        "assert hvd.allreduce(np.ones(1), op=hvd.Sum)[0] == 2\n"
        "assert hvd.broadcast_object('from0' if hvd.rank() == 0 else None) == 'from0'\n"
        "print('WORKER OK')\n")
    env = {"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "10"}
    assert_ran_ok(run_mpi(2, str(script), env=env, timeout=120), 2)
