"""The timeline is a valid Chrome trace with every phase of every tensor, even when the job is killed."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import assert_ran_ok, mpiexec_path, run_mpi, timeline_phases

PHASES = {"QUEUE", "NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"}


def test_timeline_from_environment_records_every_phase(tmp_path):
    trace = tmp_path / "trace.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, hvdlite as hvd
        hvd.init()
        for step in range(3):
            hs = [hvd.allreduce_async(np.ones(1000) * i, name=f"grad.{i}") for i in range(4)]
            [hvd.synchronize(h) for h in hs]
        hvd.allgather(np.ones((2, 2)), name="gathered")
        hvd.shutdown()
        print("WORKER OK")
    """))
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_TIMELINE": str(trace)}), 2)
    phases = timeline_phases(trace)
    for i in range(4):
        assert PHASES <= phases[f"grad.{i}"], phases[f"grad.{i}"]
        assert phases[f"grad.{i}"] & {"MPI_ALLREDUCE", "RING_ALLREDUCE"}
    assert "allgather" in phases["gathered"]


def test_timeline_started_and_stopped_at_run_time(tmp_path):
    trace = tmp_path / "runtime.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np, hvdlite as hvd
        hvd.init()
        hvd.allreduce(np.ones(10), name="before")
        hvd.start_timeline({str(trace)!r}, mark_cycles=True)
        hvd.allreduce(np.ones(10), name="during")
        hvd.stop_timeline()
        hvd.allreduce(np.ones(10), name="after")
        hvd.shutdown()
        print("WORKER OK")
    """))
    assert_ran_ok(run_mpi(2, str(script)), 2)
    phases = timeline_phases(trace)
    assert "during" in phases and "before" not in phases and "after" not in phases, phases


def test_timeline_is_valid_json_after_kill(tmp_path):
    trace = tmp_path / "killed.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, hvdlite as hvd
        hvd.init()
        step = 0
        while True:
            hvd.allreduce(np.ones(100), name=f"t.{step % 50}")
            step += 1
    """))
    process = subprocess.Popen([mpiexec_path(), "-n", "2", sys.executable, str(script)], start_new_session=True,
                               env=dict(os.environ, HVDLITE_TIMELINE=str(trace), OMP_NUM_THREADS="1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not trace.exists() or trace.stat().st_size < 20000):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    phases = timeline_phases(trace)  # json.load raises if the file is not valid JSON
    assert any(name.startswith("t.") for name in phases)
