"""Shared test helpers: run a worker script under the MPI library's own mpiexec from inside pytest, and read
the timeline it wrote."""
import json
import os
import subprocess
import sys

import pytest

# Multi-rank tests (harness/multirank.py) and the one set of checks every test uses (harness/checks.py).
pytest_plugins = ["harness.multirank", "harness.checks"]

VENV_BIN = os.path.dirname(sys.executable)
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def mpiexec_path():
    candidate = os.path.join(VENV_BIN, "mpiexec")
    return candidate if os.path.exists(candidate) else "mpiexec"


def run_mpi(nranks, script, *args, env=None, timeout=240):
    """Runs `python script args` on nranks real MPI processes; returns the CompletedProcess.

    Workers assert on every rank and exit non-zero on failure, so callers check returncode first.
    """
    full_env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    full_env.update(env or {})
    command = [mpiexec_path(), "-n", str(nranks), sys.executable, script, *map(str, args)]
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=timeout)


def assert_ran_ok(result, nranks, marker="WORKER OK"):
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"exit {result.returncode}\n{output[-6000:]}"
    assert output.count(marker) == nranks, output[-6000:]


@pytest.fixture
def mpirun():
    return run_mpi


def timeline_phases(path):
    """{tensor name: set of phase names} from a timeline file (json.load fails on invalid JSON)."""
    with open(path) as f:
        events = json.load(f)
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    phases = {}
    for e in events:
        if e.get("ph") == "X":
            phases.setdefault(rows[e["tid"]], set()).add(e["name"])
    return phases
