"""Removes the shared-memory segments that MPI leaves in /dev/shm when a job's ranks are killed, as many tests do on
purpose (a killed rank cannot unlink what it made): those that appeared while the tests ran and that no process
maps any more, at once rather than when a later job starts (hvdlite.mpi_leftovers, which waits until they are old).
Without it every run of the suite leaves a few dozen segments (2 MB each of MPICH's, 16 MB of Open MPI's) on a
developer's machine. Only in the pytest that runs the suite, not in the ranks of the jobs it launches
(multirank.py)."""
import os

from hvdlite.mpi_leftovers import mapped_segments, segments

from .multirank import job_size


def pytest_sessionstart(session):
    session.config.mpi_segments_before = segments() if job_size() is None else None


def pytest_sessionfinish(session):
    before = getattr(session.config, "mpi_segments_before", None)
    if before is None:
        return
    for path in segments() - before - mapped_segments():
        try:
            os.unlink(path)
        except OSError:
            pass
