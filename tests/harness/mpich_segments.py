"""Removes the shared-memory segments that MPICH leaves in /dev/shm when a job's ranks are killed, as many tests
do on purpose (a killed rank cannot unlink what it made): those that appeared while the tests ran and that no
process maps any more. Without it every run of the suite leaves a few dozen 2 MB segments on a developer's machine.
Only in the pytest that runs the suite, not in the ranks of the jobs it launches (multirank.py)."""
import glob
import os

from .multirank import job_size

SEGMENTS = "/dev/shm/mpich_shm_*"


def _mapped():
    """The paths of the segments some live process maps."""
    found = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as stream:
                found.update(line.split(None, 5)[5].strip() for line in stream if "/dev/shm/mpich_shm_" in line)
        except (OSError, IndexError):  # a process gone meanwhile, or not ours to read
            continue
    return found


def pytest_sessionstart(session):
    session.config.mpich_segments_before = set(glob.glob(SEGMENTS)) if job_size() is None else None


def pytest_sessionfinish(session):
    before = getattr(session.config, "mpich_segments_before", None)
    if before is None:
        return
    for path in set(glob.glob(SEGMENTS)) - before - _mapped():
        try:
            os.unlink(path)
        except OSError:
            pass
