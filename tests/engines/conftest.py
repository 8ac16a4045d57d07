"""The engine tests' fixture: a variable the ranks inherit (from the launcher on the driver), to find any left
behind."""
import uuid

import pytest

from hvdlite.runner.job import processes_with_environment


@pytest.fixture
def job_token(monkeypatch):
    token = uuid.uuid4().hex
    monkeypatch.setenv("HVDLITE_TEST_TOKEN", token)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield token
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []
