"""The direct all-reduce: each rank reads its share straight out of its peers' memory (shared staging
buffers for fused batches and tensors up to 4 MiB, process_vm_readv above). Checked on 2, 3 and 4 real ranks
against float64 references, auto's choice of it seen in the timeline, and where init's probe finds it cannot
work: forced, init fails on every rank with the reason; auto, the ring reduces instead."""
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


@pytest.mark.parametrize("algorithm", ["direct", "ring"])
def test_views_of_one_buffer_reduce_as_runs(algorithm):
    env = dict(WORKER_ENV, HVDLITE_ALLREDUCE_ALGORITHM=algorithm)
    assert_ran_ok(run_mpi(3, WORKER, "views", env=env), 3)


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


UNAVAILABLE_JOB = """
    import resource, sys
    import numpy as np
    import hvdlite as hvd
    from hvdlite.errors import HvdliteError
    forced = sys.argv[1] == "direct"
    hvd.init()  # once as usual, so that the second init below opens no new files of Python's
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if rank == size - 1:  # this rank cannot make the shared staging buffer init's probe maps
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, limits[1]))
    try:
        hvd.init()
        error = None
    except HvdliteError as caught:
        error = str(caught)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    if forced:
        assert error is not None, "init with direct forced must fail where direct cannot work"
        assert f"rank {size - 1} cannot read its peers' memory" in error and "memfd_create" in error, error
        assert not hvd.is_initialized()
    else:
        assert error is None, error
        x = np.arange(1 << 18, dtype=np.float64) * (rank + 1)
        out = hvd.allreduce(x, name="big", op=hvd.Sum)
        assert np.array_equal(out, np.arange(1 << 18, dtype=np.float64) * (size * (size + 1) // 2)), out[:4]
        hvd.shutdown()
    print("WORKER OK")
"""


@pytest.mark.parametrize("algorithm", ["direct", "auto"])
def test_where_direct_cannot_work_init_says_why_or_auto_uses_the_ring(tmp_path, algorithm):
    trace = tmp_path / "trace.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(UNAVAILABLE_JOB))
    env = {"HVDLITE_ALLREDUCE_ALGORITHM": algorithm, "HVDLITE_TIMELINE": str(trace)}
    assert_ran_ok(run_mpi(3, str(script), algorithm, env=env), 3)
    if algorithm == "auto":
        phases = timeline_phases(trace)
        assert "RING_ALLREDUCE" in phases["big"] and "DIRECT_ALLREDUCE" not in phases["big"], phases["big"]
