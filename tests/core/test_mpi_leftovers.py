"""What killed MPI jobs leave in /dev/shm, removed when hvdlite next starts on the host: a real job whose rank is
SIGKILLed leaves its shared-memory segments; the next job's first rank removes them, while the segments of a job
still running stay (it then all-reduces correctly through them) and so do segments too new to be orphans. Run with
MPICH here and with Open MPI by `make test-openmpi` (their segments are named differently)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from harness.processes import QUIET_THREADS, read_until, run, venv_tool
from hvdlite import mpi_leftovers
from hvdlite.runner.job import processes_with_environment

pytestmark = pytest.mark.openmpi

RUNNING = """
import os, sys, time
import numpy as np
import hvdlite as hvd
hvd.init()
hvd.allreduce(np.ones(4), name="up")
print("UP", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
out = hvd.allreduce(np.arange(1 << 16, dtype=np.float64) * (hvd.rank() + 1), name="after", op=hvd.Sum)
assert np.array_equal(out, np.arange(1 << 16, dtype=np.float64) * 3), "wrong sum"
print("DONE", hvd.rank(), flush=True)
"""

# Its processes are all SIGKILLed once its ranks are up (as an OOM kill or a scheduler's kill -9 does): nothing of
# the job can clean up after it, MPICH's ranks or Open MPI's daemon.
KILLED = """
import time
import numpy as np
import hvdlite as hvd
hvd.init()
hvd.allreduce(np.ones(1 << 16), name="up")
print("UP", flush=True)
time.sleep(600)
"""

STARTS = "import hvdlite as hvd\nhvd.init()\nhvd.shutdown()\n"


def _segments():
    return mpi_leftovers.segments()


def _backdate(paths, seconds=2 * mpi_leftovers.MIN_AGE_SECONDS):
    for path in paths:
        try:
            status = os.stat(path)
            os.utime(path, (status.st_atime - seconds, status.st_mtime - seconds))
        except FileNotFoundError:  # another job's, removed by it meanwhile (a developer's machine runs others)
            pass


def _kill_a_job_hard(script):
    token = uuid.uuid4().hex
    job = subprocess.Popen([venv_tool("hvdliterun"), "-np", "2", sys.executable, str(script)],
                           env=dict(os.environ, **QUIET_THREADS, HVDLITE_TEST_TOKEN=token), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        read_until(job, "UP", 2, "the job to be killed was up")
    finally:
        # Stopped first, all of them, so that none sees another die and cleans up before its own end.
        pids = processes_with_environment("HVDLITE_TEST_TOKEN", token)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        job.kill()
        job.communicate(timeout=60)


def test_the_next_job_removes_what_a_killed_job_left_and_nothing_in_use(tmp_path):
    for name, body in (("running.py", RUNNING), ("killed.py", KILLED), ("starts.py", STARTS)):
        (tmp_path / name).write_text(textwrap.dedent(body))
    go = tmp_path / "go"
    before = _segments()
    running = subprocess.Popen([venv_tool("hvdliterun"), "-np", "2", sys.executable, str(tmp_path / "running.py"),
                                str(go)], env=dict(os.environ, **QUIET_THREADS), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        seen = read_until(running, "UP", 2, "the running job's ranks were up")
        in_use = _segments() - before
        assert in_use and in_use <= mpi_leftovers.mapped_segments(), in_use
        before_killed = _segments()
        _kill_a_job_hard(tmp_path / "killed.py")
        left = _segments() - before_killed - mpi_leftovers.mapped_segments()
        assert left, "the killed job left no segment: nothing here to remove"
        # Test stand-ins, not MPI's: segments another job is starting with (not mapped yet, but new).
        fresh = {f"{prefix}hvdlitetest_{uuid.uuid4().hex[:8]}" for prefix in mpi_leftovers.PREFIXES}
        for path in fresh:
            open(path, "wb").close()
        _backdate(left | in_use)  # old enough to be orphans, the running job's included
        code, output = run([venv_tool("hvdliterun"), "-np", "2", sys.executable, str(tmp_path / "starts.py")],
                           timeout=120, env={"HVDLITE_LOG_LEVEL": "info"})
        assert code == 0, output[-3000:]
        assert "shared-memory segments that killed MPI jobs left in /dev/shm" in output, output[-3000:]
        now = _segments()
        assert not left & now, f"left behind still: {left & now}"
        assert in_use <= now and fresh <= now, "removed a segment in use or one too new"
        go.touch()
        rest = running.communicate(timeout=120)[0]
        assert running.returncode == 0 and seen.count("UP") == 2 and rest.count("DONE") == 2, (seen + rest)[-3000:]
    finally:
        go.touch()
        if running.poll() is None:
            running.kill()
        for path in locals().get("fresh", ()):
            if os.path.exists(path):
                os.unlink(path)
