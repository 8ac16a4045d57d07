"""The eager path: repeated small all-reduces completed by the negotiation round itself, on 2 and 3 real
MPI ranks, checked against float64 references (see core_workers/eager.py); and the same job with it off."""
import os

import pytest

from conftest import TESTS_DIR, assert_ran_ok, run_mpi

WORKER = os.path.join(TESTS_DIR, "core_workers", "eager.py")


def _env(tmp_path, **extra):
    return dict({"PYTHONPATH": os.path.join(TESTS_DIR, "core_workers"),
                 "HVDLITE_TIMELINE": str(tmp_path / "trace.json"),
                 "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "20"}, **extra)


@pytest.mark.parametrize("nranks", [2, 3])
def test_repeated_allreduces_go_eager_and_match_reference(tmp_path, nranks):
    assert_ran_ok(run_mpi(nranks, WORKER, "eager", "eager", env=_env(tmp_path)), nranks)


def test_eager_with_a_tiny_cache_and_payload(tmp_path):
    # Evictions reassign planned bits; a 64-byte payload fits only the smallest tensors' rounds.
    env = _env(tmp_path, HVDLITE_CACHE_CAPACITY="4", HVDLITE_EAGER_MAX_BYTES="64")
    result = run_mpi(3, WORKER, "tiny", "eager-some", env=env)
    assert_ran_ok(result, 3)


def test_eager_off_gives_the_same_results(tmp_path):
    assert_ran_ok(run_mpi(2, WORKER, "off", "no-eager", env=_env(tmp_path, HVDLITE_EAGER_MAX_BYTES="0")), 2)
