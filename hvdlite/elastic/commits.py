"""Committed states on each host's local disk, and agreeing on the newest one when a job starts again.

Every host keeps the commits of the job in one directory (HVDLITE_ELASTIC_COMMIT_DIR, default
``<tmp>/hvdlite-elastic-<job>``): its first rank writes each commit as ``commit-<sequence>.pkl`` by writing a
temporary file, fsyncing it and renaming it over the name, so a reader sees a whole commit or none, and removes
all but the newest two. A commit starts with a magic and the SHA-256 of its pickle: one damaged on disk is
skipped for the one before it. Any host's copy is enough to resume: losing a host, rank 0's included, loses
nothing committed.
"""
import glob
import hashlib
import os
import pickle
import shutil
import socket
import sys
import tempfile

import numpy as np

from hvdlite import basics, ops
from hvdlite.process_sets import global_process_set

DIRECTORY_VARIABLE = "HVDLITE_ELASTIC_COMMIT_DIR"
JOB_VARIABLE = "HVDLITE_ELASTIC_JOB"  # set by hvdliterun, the same on every restart of one job
KEEP = 2  # the newest commits kept per host: one to fall back to if the newest is damaged
MAGIC = b"HVDLCMT1"


def directory(environ=os.environ):
    """This job's commit directory on this host. In HVDLITE_ELASTIC_COMMIT_DIR, ``{host}`` stands for this host's
    name (hosts that share a file system then keep separate copies)."""
    if environ.get(DIRECTORY_VARIABLE):
        return environ[DIRECTORY_VARIABLE].replace("{host}", socket.gethostname())
    job = environ.get(JOB_VARIABLE) or f"pid{os.getppid()}"
    return os.path.join(tempfile.gettempdir(), f"hvdlite-elastic-{job}")


def writes_here():
    """Whether this rank writes its host's copy (one writer per host: the ranks of a host hold the same state)."""
    return basics.local_rank() == 0


def write(sequence, payload):
    """Stores commit ``sequence`` (a picklable object) atomically; returns its path."""
    folder = directory()
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"commit-{sequence:012d}.pkl")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".commit-", suffix=".partial")
    try:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(handle, "wb") as stream:
            stream.write(MAGIC + hashlib.sha256(data).digest())
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, final)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    _sync_directory(folder)
    for older in sorted(_commit_files(folder))[:-KEEP]:
        os.unlink(older)
    return final


def _sync_directory(folder):
    """Makes the rename itself durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _commit_files(folder):
    return glob.glob(os.path.join(folder, "commit-*.pkl"))


def read_verified(path):
    """The pickle bytes of a commit file, or None when it is damaged (wrong magic, checksum or length)."""
    try:
        with open(path, "rb") as stream:
            content = stream.read()
    except OSError:
        return None
    header = len(MAGIC) + 32
    if len(content) < header or not content.startswith(MAGIC):
        return None
    data = content[header:]
    return data if hashlib.sha256(data).digest() == content[len(MAGIC):header] else None


def newest_here():
    """(sequence, pickle bytes) of this host's newest intact commit, or (-1, None); damaged ones are reported and
    skipped."""
    for path in sorted(_commit_files(directory()), reverse=True):
        data = read_verified(path)
        if data is not None:
            return int(os.path.basename(path)[len("commit-"):-len(".pkl")]), data
        print(f"[hvdlite rank {basics.rank()}] elastic: commit {path} is damaged; using an older one",
              file=sys.stderr, flush=True)
    return -1, None


def agree_and_load():
    """On every rank: the newest commit any host holds, read by one rank that holds it and broadcast to all, as
    (sequence, payload); (-1, None) when no host has one."""
    sequence, data = newest_here() if writes_here() else (-1, None)
    newest = int(ops.allreduce(np.array([sequence], np.int64), op=ops.Max, name="elastic.newest_commit")[0])
    if newest < 0:
        return -1, None
    holder = basics.rank() if sequence == newest else basics.size()
    root = int(ops.allreduce(np.array([holder], np.int64), op=ops.Min, name="elastic.commit_holder")[0])
    # The pickle goes as it is on disk, unpickled once on every rank.
    data = ops.broadcast_object(data if basics.rank() == root else None, root_rank=root, name="elastic.commit",
                                process_set=global_process_set)
    return newest, pickle.loads(data)


def remove():
    """Deletes this host's commits (a finished job cleans up after itself)."""
    shutil.rmtree(directory(), ignore_errors=True)
