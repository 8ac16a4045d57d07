"""Ranks that wait for collectives the others never submit (a deadlock) end the job with the stall report on every
rank, and a rank that is computing, however long, is waited for."""
import sys
import textwrap
import time

import numpy as np
import pytest
from mpi4py import MPI

import hvdlite as hvd
from harness.processes import run, venv_tool

DEADLOCK_SECONDS = 3
# Stalls looked at every second; a deadlock ends after DEADLOCK_SECONDS, a single stalled tensor never.
SHORT_BOUNDS = dict(HVDLITE_STALL_CHECK_TIME_SECONDS=1, HVDLITE_DEADLOCK_TIMEOUT_SECONDS=DEADLOCK_SECONDS)


@pytest.mark.ranks(2, 3)
@pytest.mark.sanitize(address=True, thread=True)
@pytest.mark.hvd_env(**SHORT_BOUNDS)
def test_ranks_waiting_for_different_collectives_fail_on_every_rank_with_the_report():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    assert np.allclose(hvd.allreduce(np.ones(2), name="before", op=hvd.Sum), size)
    MPI.COMM_WORLD.Barrier()
    started = time.monotonic()
    # Each rank runs a collective of its own: rank 0 a broadcast, the others an all-reduce under their own names.
    if rank == 0:
        call, args = hvd.broadcast, (np.ones(3), 0)
    else:
        call, args = hvd.allreduce, (np.ones(3),)
    with pytest.raises(hvd.HvdliteError) as failure:
        call(*args, name=f"branch.{rank}")
    waited = time.monotonic() - started
    report = str(failure.value)
    assert "every rank of process set 0" in report and "different collectives" in report, report
    assert "broadcast 'branch.0'" in report, report
    for r in range(size):
        others = [o for o in range(size) if o != r]
        assert f"'branch.{r}'" in report and f"submitted by ranks [{r}], not by ranks {others}" in report, report
    assert DEADLOCK_SECONDS <= waited < DEADLOCK_SECONDS + 20, waited
    # The job is over: what comes after fails at once with the same report, on every rank.
    with pytest.raises(hvd.HvdliteError) as later:
        hvd.allreduce(np.ones(2), name="after")
    assert str(later.value) == report
    MPI.COMM_WORLD.Barrier()
    hvd.shutdown()
    hvd.init()  # a new start works
    assert np.allclose(hvd.allreduce(np.ones(2), name="again", op=hvd.Sum), size)
    hvd.shutdown()


@pytest.mark.ranks(2)
@pytest.mark.sanitize(address=True)
@pytest.mark.hvd_env(**SHORT_BOUNDS)
def test_a_rank_computing_longer_than_the_deadlock_timeout_is_waited_for():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    computing = 3 * DEADLOCK_SECONDS
    values = [np.arange(4, dtype=np.float64) * (r + 1) for r in range(size)]
    MPI.COMM_WORLD.Barrier()
    started = time.monotonic()
    if rank == 1:
        # It holds an async request while it computes (no call of its own waits): not a deadlock either.
        pending = hvd.allreduce_async(values[rank], name="metric", op=hvd.Sum)
        time.sleep(computing)
        step = hvd.allreduce(values[rank], name="step", op=hvd.Sum)
        metric = hvd.synchronize(pending)
    else:
        step = hvd.allreduce(values[rank], name="step", op=hvd.Sum)  # waits for rank 1 the whole time
        metric = hvd.allreduce(values[rank], name="metric", op=hvd.Sum)
    waited = time.monotonic() - started
    expected = np.sum(values, axis=0)
    assert np.array_equal(step, expected) and np.array_equal(metric, expected), (step, metric)
    assert waited >= computing, waited
    hvd.shutdown()


def test_the_report_reaches_a_test_runners_output_on_every_rank(tmp_path):
    """pytest captures each rank's stderr, where the stall inspector logs: the deadlock's report still reaches the
    user, in the failure pytest prints for each rank's test, and the job ends."""
    test_file = tmp_path / "test_diverging.py"
    test_file.write_text(textwrap.dedent("""
        import numpy as np
        import hvdlite as hvd

        def test_ranks_take_different_branches():
            hvd.init()
            if hvd.rank() == 0:
                hvd.allreduce(np.ones(2), name="loss")
            else:
                hvd.broadcast(np.ones(2), 0, name="weights")
    """))
    env = {"HVDLITE_STALL_CHECK_TIME_SECONDS": "1", "HVDLITE_DEADLOCK_TIMEOUT_SECONDS": str(DEADLOCK_SECONDS)}
    started = time.monotonic()
    code, output = run([venv_tool("mpiexec"), "-n", "2", sys.executable, "-m", "pytest", "-q", "-p",
                        "no:cacheprovider", str(test_file)], timeout=120, env=env, cwd=str(tmp_path))
    elapsed = time.monotonic() - started
    assert code != 0, output
    assert output.count("every rank of process set 0 has waited") >= 2, output  # each rank's failure
    assert output.count("1 failed") == 2, output
    for line in ("allreduce 'loss' (waited", "submitted by ranks [0], not by ranks [1]",
                 "broadcast 'weights' (waited", "submitted by ranks [1], not by ranks [0]"):
        assert line in output, output
    assert elapsed < 60, elapsed
