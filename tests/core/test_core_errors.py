"""Bad input and failures raise on every rank with a message naming the tensor and ranks; nothing hangs."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from mpi4py import MPI

import hvdlite as hvd
from hvdlite._native import ffi, lib
from harness.checks import assert_raises
from harness.processes import assert_ran_ok, run_mpi, venv_tool

pytestmark = [pytest.mark.across_hosts, pytest.mark.sanitize(address=True, thread=True)]


def in_a_job(test):
    """A multi-rank test at 2 and 3 ranks, where a stalled tensor is reported after 1 s and fails after 3 s."""
    marks = (pytest.mark.ranks(2, 3), pytest.mark.usefixtures("started"),
             pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=1, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=3))
    for mark in marks:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def started():
    hvd.init()


@in_a_job
def test_mismatched_inputs_raise_on_every_rank_naming_tensor_and_ranks():
    rank, size = hvd.rank(), hvd.size()
    assert_raises(hvd.HvdliteError, hvd.allreduce, np.zeros(rank + 2), match=["'bad.shape'", "rank 0 sent [2]", "rank 1 sent [3]"], name="bad.shape")
    dtype = np.float32 if rank == 0 else np.float64
    assert_raises(hvd.HvdliteError, hvd.allreduce, np.zeros(3, dtype=dtype), match=["data types", "'bad.dtype'", "rank 0 sent float32", "rank 1 sent float64"], name="bad.dtype")
    assert_raises(hvd.HvdliteError, hvd.allreduce, np.zeros(3), match=["reduce ops", "'bad.op'", "rank 0 sent sum", "rank 1 sent max"], name="bad.op", op=hvd.Sum if rank == 0 else hvd.Max)
    assert_raises(hvd.HvdliteError, hvd.broadcast, np.zeros(3), match=["root ranks", "'bad.root'"], root_rank=0 if rank == 0 else 1, name="bad.root")
    assert_raises(hvd.HvdliteError, hvd.allreduce, np.zeros(3), match=["prescale", "'bad.scale'"], name="bad.scale", prescale_factor=1.0 + rank)
    assert_raises(hvd.HvdliteError, hvd.allgather, np.zeros((2, rank + 1)), match=["all but the first dimension", "'bad.gather'"], name="bad.gather")
    assert_raises(hvd.HvdliteError, hvd.allreduce if rank == 0 else hvd.broadcast, np.zeros(3), *(() if rank == 0 else (0,)), match=["collective operations", "'bad.kind'", "allreduce", "broadcast"], name="bad.kind")
    # One bad member fails the grouped call on every rank, once the whole group is done (one wait for all).
    assert_raises(hvd.HvdliteError, hvd.grouped_allreduce, [np.ones(2), np.zeros(rank + 2), np.ones(4)], match=["'grp.bad.1'", "rank 0 sent [2]", "rank 1 sent [3]"], name="grp.bad", op=hvd.Sum)
    # The same names work afterwards: errors are not cached.
    assert np.allclose(hvd.allreduce(np.ones(2), name="bad.shape", op=hvd.Sum), size)
    grouped = hvd.grouped_allreduce([np.ones(2), np.ones(3), np.ones(4)], name="grp.bad", op=hvd.Sum)
    assert [o.shape for o in grouped] == [(2,), (3,), (4,)] and all(np.allclose(o, size) for o in grouped)


@in_a_job
def test_bad_local_input_raises_on_the_rank_that_gave_it():
    rank = hvd.rank()
    assert_raises(ValueError, hvd.allreduce, np.ones(3, dtype=bool), match=["bool", "'flags'"], name="flags")
    assert_raises(TypeError, hvd.allreduce, np.ones(3, dtype=np.complex128), match=["complex128"], name="cplx")
    assert_raises(ValueError, hvd.broadcast, np.ones(3), match=["root rank"], root_rank=99, name="far")
    assert_raises(ValueError, hvd.allreduce, np.ones(3, np.int32), match=["Adasum", "floating-point", "'adasum.ints'"], op=hvd.Adasum, name="adasum.ints")
    assert_raises(ValueError, hvd.reducescatter, np.ones(4), match=["Adasum", "reducescatter"], op=hvd.Adasum)
    if hvd.size() & (hvd.size() - 1):
        assert_raises(ValueError, hvd.allreduce, np.ones(3), match=["Adasum", "power-of-two", "has 3"], op=hvd.Adasum)
    assert_raises(ValueError, hvd.allreduce, np.ones(3), match=["op parameter supersedes average"], op=hvd.Sum, average=True)
    assert_raises(ValueError, hvd.alltoall, np.ones(4), match=["splits"], splits=[1, 1, 1, 1, 1][:hvd.size() + 1])


@in_a_job
def test_a_name_submitted_twice_in_flight_is_a_value_error():
    rank, size = hvd.rank(), hvd.size()
    # A name only this rank submits stays in flight until the others submit it too.
    mine = hvd.allreduce_async(np.ones(2), name=f"dup.{rank}", op=hvd.Sum)
    assert_raises(ValueError, hvd.allreduce_async, np.ones(2), match=[f"'dup.{rank}'", "already in flight"], name=f"dup.{rank}")
    others = [hvd.allreduce_async(np.ones(2), name=f"dup.{r}", op=hvd.Sum) for r in range(size) if r != rank]
    for h in [mine] + others:
        assert np.allclose(hvd.synchronize(h), size)


@in_a_job
def test_a_tensor_some_ranks_never_submit_is_reported_then_fails():
    rank, size = hvd.rank(), hvd.size()
    # Slow path: only rank 0 submits; it fails after the stall shutdown time, naming the missing ranks.
    if rank == 0:
        missing = ", ".join(str(r) for r in range(1, size))
        assert_raises(hvd.HvdliteError, hvd.allreduce, np.ones(2), match=["Stalled", "'lonely'", f"[{missing}]"], name="lonely")
        buffer = ffi.new("char[]", 4096)
        lib.hvdlite_last_warning(buffer, 4096)
        warning = ffi.string(buffer).decode()
        assert "'lonely'" in warning and f"missing ranks: [{missing}]" in warning, warning
    MPI.COMM_WORLD.Barrier()  # not hvd.barrier(): it would stall behind rank 0 too
    # Fast path: the name is cached first, then only rank 0 submits it again.
    for _ in range(2):
        hvd.allreduce(np.ones(2), name="cached.lonely")
    if rank == 0:
        assert_raises(hvd.HvdliteError, hvd.allreduce, np.ones(2), match=["Stalled", "'cached.lonely'"], name="cached.lonely")
    MPI.COMM_WORLD.Barrier()


@in_a_job
def test_shutdown_fails_what_is_pending():
    rank, size = hvd.rank(), hvd.size()
    # Rank 0 waits on a tensor nobody else sends; rank 1 shuts down, which must fail it, not hang it.
    if rank == 0:
        assert_raises(hvd.HvdliteError, hvd.allreduce, np.ones(2), match=["shut down"], name="orphan")
    elif rank == 1:
        hvd.shutdown()
    hvd.shutdown()
    hvd.shutdown()  # idempotent
    assert not hvd.is_initialized()
    assert_raises(ValueError, hvd.rank, match=["not been initialized"])
    assert_raises(ValueError, hvd.allreduce_async, np.ones(1), match=["not been initialized"], name="late")
    hvd.init()  # and again after shutdown
    assert np.allclose(hvd.allreduce(np.ones(2), name="again", op=hvd.Sum), size)


def _script(tmp_path, body):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize("how", ["kill -9", "exception"])
def test_a_dead_peer_ends_the_job_fast(tmp_path, how):
    death = "os.kill(os.getpid(), signal.SIGKILL)" if how == "kill -9" else "raise RuntimeError('boom')"
    script = _script(tmp_path, f"""
        import os, signal, time
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        hvd.allreduce(np.ones(4), name="warmup")
        if hvd.rank() == 1:
            time.sleep(0.5)
            {death}
        hvd.allreduce(np.ones(4), name="never-completes")  # waits for the dead rank
        time.sleep(600)
    """)
    start = time.monotonic()
    process = subprocess.Popen([venv_tool("mpiexec"), "-n", "2", sys.executable, script], start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    elapsed = time.monotonic() - start
    assert process.returncode != 0, output
    assert elapsed < 30, f"took {elapsed:.1f} s"
    leftover = subprocess.run(["pgrep", "-f", script], capture_output=True, text=True).stdout.strip()
    assert leftover == "", f"orphan processes: {leftover}"


def test_functions_before_init_raise_value_error(tmp_path):
    script = _script(tmp_path, """
        import hvdlite as hvd
        for query in (hvd.rank, hvd.size, hvd.local_rank):
            try:
                query()
            except ValueError as e:
                assert "not been initialized" in str(e)
            else:
                raise AssertionError("no error before init")
        print("WORKER OK")
    """)
    assert_ran_ok(run_mpi(1, script), 1)


def test_queries_keep_working_after_a_peer_shuts_down(tmp_path):
    script = _script(tmp_path, """
        import time
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        hvd.allreduce(np.ones(2), name="x")
        if hvd.rank() == 1:
            hvd.shutdown()
        else:
            time.sleep(1.0)  # rank 1's shutdown has stopped the background threads by now
            assert hvd.is_initialized() and hvd.rank() == 0 and hvd.size() == 2
            try:
                hvd.allreduce(np.ones(2), name="after")
            except hvd.HvdliteError as e:
                assert "shut down" in str(e), e
            else:
                raise AssertionError("a collective after a peer's shutdown must fail")
        print("WORKER OK")
    """)
    assert_ran_ok(run_mpi(2, script), 2)


def test_importing_the_launcher_loads_neither_mpi_nor_the_core():
    code = ("import sys, hvdlite, hvdlite.runner, hvdlite.config; "
            "loaded = {'mpi4py.MPI', 'hvdlite._native'} & set(sys.modules); assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
