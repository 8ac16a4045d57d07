"""Removes the shared-memory segments that killed MPI jobs left on this host.

The ranks of a job on one host share segments in /dev/shm: MPICH's ``mpich_shm_*`` (2 MB and more each), Open
MPI's ``sm_segment.*`` (16 MB for each rank), which a job that ends normally removes. A job whose ranks are killed
(a lost peer, an OOM kill, every failure an elastic job restarts after) leaves them, and they hold their memory
until the host reboots. The first rank of each host removes, when hvdlite starts, those of its user that no
process maps any more and that are older than MIN_AGE_SECONDS.

Why the age: a segment is opened by name only while its job starts (its first rank on the host creates it, the
others open it in their MPI_Init), and a job whose processes this one cannot see (another container that shares
the host's /dev/shm but not its process table) may be starting right now. Removing a segment that is mapped
already breaks nothing: the mappings stay. Ten minutes is longer than any job takes to start.
"""
import glob
import os
import time

PREFIXES = ("/dev/shm/mpich_shm_", "/dev/shm/sm_segment.")  # MPICH's, Open MPI's
MIN_AGE_SECONDS = 600.0


def segments():
    """The paths of every MPI job's segments on this host, any user's."""
    return {path for prefix in PREFIXES for path in glob.glob(prefix + "*")}


def mapped_segments():
    """The paths of the segments some live process (that this user may read) maps."""
    found = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as stream:
                found.update(line.split(None, 5)[5].strip() for line in stream
                             if any(prefix in line for prefix in PREFIXES))
        except (OSError, IndexError):  # a process gone meanwhile, or not ours to read
            continue
    return found


def orphaned_segments(min_age=MIN_AGE_SECONDS, now=None):
    """This user's segments that are older than ``min_age`` seconds and that no process maps."""
    now = time.time() if now is None else now
    old = []
    for path in segments():
        try:
            status = os.stat(path)
        except OSError:
            continue
        if status.st_uid == os.getuid() and now - status.st_mtime >= min_age:
            old.append(path)
    # Reading every process's maps costs more than the rest: only when some segment may be left over.
    return sorted(set(old) - mapped_segments()) if old else []


def remove_orphaned_segments():
    """Removes this user's orphaned segments on this host; returns their paths."""
    removed = []
    for path in orphaned_segments():
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed
