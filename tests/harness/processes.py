"""Programs that tests start as a user would (mpiexec, hvdliterun, an example, a benchmark), with a time limit.

Multi-rank behaviour is tested by multi-rank tests (multirank.py); these are for what only a whole program
shows: the launcher, a killed rank, an example's accuracy, a benchmark's output."""
import os
import subprocess
import sys

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS_DIR)
# One thread per pool, so that several ranks share the 2 cores of a CI machine.
QUIET_THREADS = {"OMP_NUM_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                 "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def with_hvdlite_importable(env):
    """env with the folder that holds this hvdlite first on PYTHONPATH, for programs that import it however they
    are started (a launcher's ranks, a program run as a module)."""
    import hvdlite
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(hvdlite.__file__)))
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")])))


def venv_tool(name):
    """The venv's own program (mpiexec, hvdliterun) where it has one, else the one on PATH."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else name


def run(command, timeout, env=None, cwd=ROOT):
    """Runs command; returns (returncode, stdout and stderr together). A time-out is a test failure."""
    full_env = dict(os.environ, **QUIET_THREADS)
    full_env.update(env or {})
    try:
        result = subprocess.run(command, env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        output = expired.output.decode() if isinstance(expired.output, bytes) else (expired.output or "")
        raise AssertionError(f"timed out after {timeout}s: {' '.join(command)}\n{output[-6000:]}") from None
    return result.returncode, result.stdout


def run_mpi(nranks, script, *args, env=None, timeout=240):
    """Runs `python script args` on nranks MPI processes; returns the CompletedProcess (output captured)."""
    full_env = dict(os.environ, **QUIET_THREADS)
    full_env.update(env or {})
    command = [venv_tool("mpiexec"), "-n", str(nranks), sys.executable, script, *map(str, args)]
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=timeout)


def assert_ran_ok(result, nranks, marker="WORKER OK"):
    """Every rank of a script run by run_mpi printed marker, and the job exited 0."""
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"exit {result.returncode}\n{output[-6000:]}"
    assert output.count(marker) == nranks, output[-6000:]


def read_until(process, marker, count, what):
    """Reads a running process's output (a text pipe) until ``marker`` has appeared ``count`` times; returns what it
    read. Fails, saying ``what`` was awaited, when the output ends first."""
    seen = ""
    while seen.count(marker) < count:
        line = process.stdout.readline()
        assert line, f"the output ended before {what}: {seen[-3000:]}"
        seen += line
    return seen
