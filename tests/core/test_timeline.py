"""The timeline is a valid Chrome trace with every phase of every tensor, even when the job is killed."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness.processes import assert_ran_ok, run_mpi, venv_tool
from harness.timeline import timeline_phases

pytestmark = pytest.mark.sanitize(address=True)

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


def test_timeline_stopped_cleanly_is_compact_and_cuts_long_names(tmp_path):
    # Enough events to outgrow the first 64 KiB of room; a 3000-character name of 2-byte characters
    # is cut to fit a file page, on a character boundary.
    trace = tmp_path / "trace.json"
    long_name = "\u00fc" * 3000
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np, hvdlite as hvd
        hvd.init()
        for step in range(400):
            hvd.allreduce(np.ones(10), name=f"step.{{step}}")
        hvd.allreduce(np.ones(10), name={long_name!r})
        hvd.shutdown()
        print("WORKER OK")
    """))
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_TIMELINE": str(trace)}), 2)
    text = trace.read_text(encoding="utf-8")
    # The room left at the end is gone; what stays is the few spaces where an event skipped to the next page.
    assert text.endswith("}\n]\n") and len(text) < 1.05 * len(text.replace(" ", "")), text[-200:]
    assert not (tmp_path / "trace.json.partial").exists()
    phases = timeline_phases(trace)
    assert all(f"step.{step}" in phases for step in range(400))
    cut = [name for name in phases if name.startswith("\u00fc")]
    assert len(cut) == 1 and cut[0] == "\u00fc" * 256 + "...", (len(cut), cut[0][-10:] if cut else None)


@pytest.mark.parametrize("kill_after_bytes", [1, 300_000], ids=["first_region", "after_growing"])
def test_timeline_is_valid_json_after_kill(tmp_path, kill_after_bytes):
    # The file starts with 64 KiB of room and doubles it by a copy renamed over it: past 300 KB on
    # disk it has been replaced three times, and the kill lands at a random moment after that.
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
    process = subprocess.Popen([venv_tool("mpiexec"), "-n", "2", sys.executable, str(script)], start_new_session=True,
                               env=dict(os.environ, HVDLITE_TIMELINE=str(trace), OMP_NUM_THREADS="1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (trace.exists() and trace.stat().st_size >= kill_after_bytes
                                               and b'"t.' in trace.read_bytes()):
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 0.5))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    with open(trace) as f:
        events = json.load(f)  # raises if the file is not valid JSON
    names = {e["args"]["name"] for e in events if e.get("ph") == "M"}
    assert any(name.startswith("t.") for name in names), names
    if kill_after_bytes > 1:  # what was written before each copy is still there
        assert sum(e.get("ph") == "X" for e in events) > 2000, len(events)
