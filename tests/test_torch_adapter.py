"""hvdlite.torch on real MPI processes: each test launches a worker script (tests/torch_workers/) under mpiexec;
the worker checks every rank against independent float64 references and exits non-zero on any failure."""
import os
import re

import pytest

from conftest import run_mpi

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_workers")
# A rank that never submits turns into an error on every rank instead of a hang.
ENV = {"HVDLITE_STALL_CHECK_TIME_SECONDS": "15", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30"}


def run_worker(script, nranks, timeout=240, env=None):
    result = run_mpi(nranks, os.path.join(WORKERS, script), env=dict(ENV, **(env or {})), timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"exit {result.returncode}\n{output[-8000:]}"
    summaries = re.findall(r"TORCH-WORKER rank=(\d+) checks=(\d+) failures=(\d+)", output)
    assert sorted(int(r) for r, _, _ in summaries) == list(range(nranks)), output[-8000:]
    assert all(int(f) == 0 and int(n) > 0 for _, n, f in summaries), output[-8000:]
    return output


def test_api_surface_and_one_rank_job():
    run_worker("api_worker.py", 1)


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_collective_dtype_and_op_matches_numpy(nranks):
    run_worker("collectives_worker.py", nranks)


@pytest.mark.parametrize("nranks", [2, 3])
def test_collective_gradients_match_numerical_jacobians(nranks):
    run_worker("autograd_worker.py", nranks)


# HVDLITE_OVERLAP auto is "off" on a machine with no more cores than ranks (async work held until every
# rank waits); "on" runs each gradient's all-reduce as soon as it is ready.
@pytest.mark.parametrize("overlap", ["auto", "on"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_distributed_optimizer_broadcasts_and_sync_batch_norm(nranks, overlap):
    output = run_worker("optimizer_worker.py", nranks, env={"HVDLITE_OVERLAP": overlap})
    assert "FAIL" not in output
