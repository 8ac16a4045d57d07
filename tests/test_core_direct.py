"""The direct all-reduce: each rank reads its share straight out of its peers' memory (process_vm_readv).
Checked on 2, 3 and 4 real ranks against float64 references, and auto's choice of it seen in the timeline."""
import os
import textwrap

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi, timeline_phases

WORKER = os.path.join(TESTS_DIR, "core_workers", "direct.py")
WORKER_ENV = {"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers"),
              "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}  # a bug fails fast instead of hanging


@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_direct_allreduce_matches_float64_reference(nranks):
    env = dict(WORKER_ENV, HVDLITE_ALLREDUCE_ALGORITHM="direct")
    assert_ran_ok(run_mpi(nranks, WORKER, env=env), nranks)


def test_auto_reduces_large_messages_directly_and_small_ones_through_mpi(tmp_path):
    trace = tmp_path / "trace.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, hvdlite as hvd
        hvd.init()
        big = hvd.allreduce(np.full(1 << 18, hvd.rank() + 1.0, dtype=np.float32), name="big", op=hvd.Sum)
        small = hvd.allreduce(np.full(100, hvd.rank() + 1.0, dtype=np.float32), name="small", op=hvd.Sum)
        assert np.all(big == 3) and np.all(small == 3), (big[:4], small[:4])
        hvd.shutdown()
        print("WORKER OK")
    """))
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_TIMELINE": str(trace)}), 2)
    phases = timeline_phases(trace)
    assert "DIRECT_ALLREDUCE" in phases["big"], phases["big"]
    assert "DIRECT_ALLREDUCE" not in phases["small"] and "RING_ALLREDUCE" not in phases["small"], phases["small"]
