"""Launching TensorFlow workers from pytest: under the venv's mpiexec (or hvdliterun), with one TensorFlow
thread per pool so that several ranks share the 2 cores of a CI machine, and a timeout."""
import os
import re
import subprocess
import sys

BIN = os.path.dirname(sys.executable)
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
WORKERS = os.path.join(TESTS, "tf_workers")

TF_ENV = {"OMP_NUM_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
          "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def tool(name):
    path = os.path.join(BIN, name)
    return path if os.access(path, os.X_OK) else name


def run(command, timeout, cwd=ROOT):
    """Runs command with the TensorFlow environment; returns (returncode, combined output)."""
    env = dict(os.environ, **TF_ENV)
    try:
        result = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        output = expired.output.decode() if isinstance(expired.output, bytes) else (expired.output or "")
        raise AssertionError(f"timed out after {timeout}s: {' '.join(command)}\n{output[-6000:]}") from None
    return result.returncode, result.stdout


def run_worker(nranks, script, *args, timeout=240):
    """Runs tests/tf_workers/<script> on nranks MPI processes."""
    return run([tool("mpiexec"), "-n", str(nranks), sys.executable, os.path.join(WORKERS, script), *map(str, args)],
               timeout)


def assert_all_ranks_ok(returncode, output, nranks, more_checks_than=None):
    """Each rank of a checks.py worker prints 'rank R: N checks, 0 failed: OK'; with more_checks_than, every
    rank must also have run more checks than that (the worker really ran them, not an empty pass)."""
    tail = output[-8000:]
    assert returncode == 0, f"workers exited with {returncode}\n{tail}"
    for rank in range(nranks):
        assert f"rank {rank}: " in output and "0 failed: OK" in output, tail
    assert output.count("0 failed: OK") == nranks, tail
    if more_checks_than is not None:
        counts = [int(n) for n in re.findall(r"rank \d+: (\d+) checks", output)]
        assert len(counts) == nranks and min(counts) > more_checks_than, output[-3000:]
