"""Removes the shared-memory segments that MPICH leaves in /dev/shm when a job's ranks are killed, as many tests
do on purpose (a killed rank cannot unlink what it made): those that appeared while the tests ran and that no
process maps any more, at once rather than when a later job starts (hvdlite.mpich_leftovers, which waits until
they are old). Without it every run of the suite leaves a few dozen 2 MB segments on a developer's machine.
Only in the pytest that runs the suite, not in the ranks of the jobs it launches (multirank.py)."""
import glob
import os

from hvdlite.mpich_leftovers import SEGMENTS, mapped_segments

from .multirank import job_size


def pytest_sessionstart(session):
    session.config.mpich_segments_before = set(glob.glob(SEGMENTS)) if job_size() is None else None


def pytest_sessionfinish(session):
    before = getattr(session.config, "mpich_segments_before", None)
    if before is None:
        return
    for path in set(glob.glob(SEGMENTS)) - before - mapped_segments():
        try:
            os.unlink(path)
        except OSError:
            pass
