"""Bad input and failures raise on every rank with a message naming the tensor and ranks; nothing hangs."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import TESTS_DIR, assert_ran_ok, mpiexec_path, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "errors.py")
ENV = {"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers"),
       "HVDLITE_STALL_CHECK_TIME_SECONDS": "1", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "3"}


@pytest.mark.parametrize("nranks", [2, 3])
def test_errors_are_raised_on_every_rank(nranks):
    assert_ran_ok(run_mpi(nranks, WORKER, env=ENV, timeout=120), nranks)


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
    process = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, script], start_new_session=True,
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
    code = ("import sys, hvdlite, hvdlite.run, hvdlite.config; "
            "loaded = {'mpi4py.MPI', 'hvdlite._native'} & set(sys.modules); assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
