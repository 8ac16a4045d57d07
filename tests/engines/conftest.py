"""The engine tests' fixture: a variable the ranks inherit (from the launcher on the driver), to find any left
behind; and one line at the end of a run with the time the engine tests took (they start real JVMs and Ray
clusters: their share of the CI budget is watched)."""
import uuid

import pytest

from hvdlite.runner.job import processes_with_environment

_spent = {"tests": 0, "seconds": 0.0}


@pytest.fixture
def job_token(monkeypatch):
    token = uuid.uuid4().hex
    monkeypatch.setenv("HVDLITE_TEST_TOKEN", token)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield token
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


def pytest_runtest_logreport(report):
    if report.nodeid.startswith("tests/engines/"):
        _spent["seconds"] += report.duration
        _spent["tests"] += report.when == "call"


def pytest_terminal_summary(terminalreporter):
    if _spent["tests"]:
        terminalreporter.write_line(f"engine tests (Spark, Ray): {_spent['tests']} in {_spent['seconds']:.0f} s")
