"""Committed states on each host's local disk, and agreeing on the newest one when a job starts again.

Every host keeps the commits of the job in one directory (HVDLITE_ELASTIC_COMMIT_DIR, default
``<tmp>/hvdlite-elastic-<job>``): its first rank writes each commit as ``commit-<sequence>.pkl`` by writing a
temporary file and renaming it over the name, so a reader sees a whole commit or none. From the rename on, the
commit survives the death of any process (the kernel holds it); a background thread then fsyncs the file and the
directory, which makes it survive the host's power too, and only after that removes older commits: the newest
two are kept, the older one fsynced, for a newest one torn by a power loss. (An fsync takes the time of several
small training steps: done in line, it would make a commit slower than a step.) A commit starts with a magic and
the SHA-256 of its content: one damaged on disk is skipped for the one before it. Any host's copy is enough to
resume: losing a host, rank 0's included, loses nothing committed.
"""
import glob
import hashlib
import os
import pickle
import shutil
import socket
import struct
import sys
import tempfile
import threading

import numpy as np

from hvdlite import basics, config, ops
from hvdlite.process_sets import global_process_set
from hvdlite.run.elastic import JOB_VARIABLE
KEEP = 2  # the newest commits kept per host: one to fall back to if the newest is damaged
MAGIC = b"HVDLCMT1"


def directory(environ=os.environ):
    """This job's commit directory on this host. In HVDLITE_ELASTIC_COMMIT_DIR, ``{host}`` stands for this host's
    name (hosts that share a file system then keep separate copies)."""
    configured = config.SETTINGS_BY_NAME["elastic_commit_dir"].read(environ)
    if configured:
        return configured.replace("{host}", socket.gethostname())
    job = environ.get(JOB_VARIABLE) or f"pid{os.getppid()}"
    return os.path.join(tempfile.gettempdir(), f"hvdlite-elastic-{job}")


def writes_here():
    """Whether this rank writes its host's copy (one writer per host: the ranks of a host hold the same state)."""
    return basics.local_rank() == 0


class _Syncer:
    """The background thread that fsyncs each written commit and its directory, then removes older commits. At
    most one commit waits for it: the next write first waits for the previous commit's fsync."""

    def __init__(self):
        self._condition = threading.Condition()
        self._pending = None  # (path, folder) of the commit not yet fsynced
        self._error = None
        threading.Thread(target=self._run, name="hvdlite-commit-sync", daemon=True).start()

    def submit(self, path, folder):
        with self._condition:
            self._pending = (path, folder)
            self._condition.notify_all()

    def wait(self):
        """Until the submitted commit is durable; raises what its fsync raised."""
        with self._condition:
            self._condition.wait_for(lambda: self._pending is None)
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self):
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._pending is not None)
                path, folder = self._pending
            try:
                _fsync(path)
                _fsync(folder)  # the rename
                for older in sorted(_commit_files(folder))[:-KEEP]:
                    os.unlink(older)
            except OSError as error:
                with self._condition:
                    self._error = error
            with self._condition:
                self._pending = None
                self._condition.notify_all()


_syncer = None


def write(sequence, payload):
    """Stores commit ``sequence`` (a picklable object) atomically, fsynced in the background; returns its path."""
    global _syncer
    _syncer = _syncer or _Syncer()
    _syncer.wait()  # the previous commit is durable, and older ones are gone
    folder = directory()
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"commit-{sequence:012d}.pkl")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".commit-", suffix=".partial")
    try:
        parts = encode(payload)
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        with os.fdopen(handle, "wb") as stream:
            stream.write(MAGIC + digest.digest())
            for part in parts:
                stream.write(part)
        os.replace(temporary, final)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    _syncer.submit(final, folder)
    return final


def encode(payload):
    """The payload as a list of byte strings and buffers to write one after the other: a header (how many
    out-of-band buffers, the pickle's and each buffer's length), the pickle (protocol 5) and the arrays' memory
    itself, written from where it is instead of copied into the pickle."""
    buffers = []
    data = pickle.dumps(payload, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    header = struct.pack(f"<QQ{len(views)}Q", len(views), len(data), *(view.nbytes for view in views))
    return [header, data, *views]


def decode(body):
    """The payload of a commit's body (what ``encode`` wrote); its arrays are writable (a copy of the body)."""
    body = memoryview(bytearray(body))
    count, length = struct.unpack_from("<QQ", body)
    sizes = struct.unpack_from(f"<{count}Q", body, 16)
    at = 16 + 8 * count
    data = body[at:at + length]
    at += length
    buffers = []
    for size in sizes:
        buffers.append(body[at:at + size])
        at += size
    return pickle.loads(data, buffers=buffers)


def flush():
    """Waits until the last commit written here is durable (before a job removes its commits, and in tests)."""
    if _syncer is not None:
        _syncer.wait()


def _fsync(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _commit_files(folder):
    return glob.glob(os.path.join(folder, "commit-*.pkl"))


def read_verified(path):
    """The body of a commit file (``decode`` reads it), or None when it is damaged (wrong magic, checksum or
    length)."""
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
    """(sequence, body) of this host's newest intact commit, or (-1, None); damaged ones are reported and
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
    # The body goes as it is on disk, decoded once on every rank.
    data = ops.broadcast_object(data if basics.rank() == root else None, root_rank=root, name="elastic.commit",
                                process_set=global_process_set)
    return newest, decode(data)


def remove():
    """Deletes this host's commits (a finished job cleans up after itself)."""
    flush()
    shutil.rmtree(directory(), ignore_errors=True)
