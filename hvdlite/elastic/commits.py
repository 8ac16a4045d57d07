"""Committed states on every host, in its memory and on its disk, and agreeing on the newest one when a job
starts again.

The first rank of each host keeps the job's commits in two places:
- in memory: two slots under /dev/shm (memory_slots.py), written in line by ``commit()`` (for a state on GPUs by
  a thread once the GPU's copy is made: filler.py); they outlive every process of the job. A commit costs one
  memory copy there.
- on disk: the same commit in the commit directory (HVDLITE_ELASTIC_COMMIT_DIR, default
  ``<tmp>/hvdlite-elastic-<job>``), written by a background thread with the SHA-256 of its content and fsynced
  (file and directory), so that a host that restarts, its memory copy gone, still holds it. The thread writes
  the newest commit it has, at most once every DISK_INTERVAL seconds: a commit made meanwhile replaces the one
  waiting, so a loop committing every step keeps every commit in memory and one a second on disk, and the
  thread takes little of the CPU the training needs. Older disk
  commits go only once a newer one is durable; the newest two are kept, for a newest one damaged on disk (a
  wrong checksum or length: it is reported and skipped).
Where /dev/shm is missing or full, commits go to disk in line instead. A restart takes the newest intact commit
that any host holds, in memory or on disk: losing a host, rank 0's included, loses nothing committed.
"""
import atexit
import functools
import glob
import hashlib
import os
import sys
import tempfile
import threading

import numpy as np

from hvdlite import basics, ops
from hvdlite.errors import HorovodInternalError
from hvdlite.process_sets import global_process_set
from hvdlite.runner import commit_folders, protocol
from hvdlite.runner.commit_folders import directory, memory_directory

from . import filler, memory_slots
from .commit_body import decode, encode, parts, pickled  # noqa: F401 (encode: for callers)

KEEP = 2  # the newest disk commits kept per host: one to fall back to if the newest is damaged
MAGIC = b"HVDLCMT1"  # disk: magic, SHA-256 of the body, body
DISK_INTERVAL = 1.0  # seconds between two disk writes of the background thread
FILL_AT_EXIT = 60.0  # seconds a process that ends waits at most for a commit still coming from its GPU


def writes_here():
    """Whether this rank writes its host's copy (one writer per host: the ranks of a host hold the same state)."""
    return basics.local_rank() == 0


class _DiskWriter:
    """The background thread that puts commits on disk: copies the newest memory slot handed to it to disk (with its
    checksum), fsyncs it and its directory, then removes older disk commits. At most one slot waits for it: a
    newer one replaces it."""

    def __init__(self):
        # One lock, three reasons to wake: a commit to write (the thread), a flush asked for during its pause
        # (the thread), the thread done (flush waiters). Separate conditions, so that a commit handed over during
        # the pause does not wake the thread for nothing: commits come every step, the pause lasts a second.
        self._condition = threading.Condition()
        self._flush_asked = threading.Condition(self._condition)
        self._done = threading.Condition(self._condition)
        self._waiting = None  # (sequence, memory slot path) not yet started
        self._busy = False
        self._flushing = 0  # threads waiting in wait(): the pause between writes is skipped
        self._error = None
        threading.Thread(target=self._run, name="hvdlite-commit-disk", daemon=True).start()

    def submit(self, sequence, path):
        with self._condition:
            self._waiting = (sequence, path)
            self._condition.notify()

    def wait(self):
        """Until every commit handed over is on disk and durable; raises what writing it raised."""
        with self._condition:
            self._flushing += 1
            self._flush_asked.notify()
            self._done.wait_for(lambda: self._waiting is None and not self._busy)
            self._flushing -= 1
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self):
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._waiting is not None)
                (sequence, path), self._waiting = self._waiting, None
                self._busy = True
            try:
                # From the memory slot, which holds a copy nobody changes: the snapshot handed to write() may be
                # a view of the live state. A slot already reused for a newer commit is skipped.
                slot = memory_slots.read(path)
                if slot is not None and slot[0] == sequence:
                    write_to_disk(sequence, [slot[1]])
            except OSError as error:
                with self._condition:
                    self._error = error
            with self._condition:
                self._busy = False
                self._done.notify_all()
                # Paced, unless someone waits (flush): newer commits meanwhile replace the waiting one.
                self._flush_asked.wait_for(lambda: self._flushing, timeout=DISK_INTERVAL)


_writer = None
_filler = None
_launcher_told = False  # that this host holds commits of the job (once per process: the first commit)
_rank = None  # this process's rank, for what is said at its end (hvdlite may be shut down by then)


def _first_commit_here():
    """Before this process writes its first commit: tells the launcher (one that will not start the job again
    removes what the job leaves) and has the process's normal end finish its commits."""
    global _launcher_told, _rank
    if not _launcher_told:
        _rank = basics.rank()
        protocol.tell_launcher(protocol.COMMITTED)
        atexit.register(_at_exit)
        _launcher_told = True


def _at_exit():
    # A process that ends normally puts its last commit in memory and on disk first (the threads are daemons:
    # they would end mid-write). One that fails (hvd.elastic.run's exit) only lets a GPU's commit reach memory.
    finish_in_memory()
    try:
        flush()
    except OSError as error:
        print(f"[hvdlite rank {_rank}] elastic: the last commit did not reach the disk: {error}",
              file=sys.stderr, flush=True)


def finish_in_memory():
    """Lets a commit still coming from a GPU reach this host's memory (at most FILL_AT_EXIT seconds), reporting
    a failure instead of raising it: for a process about to end."""
    if _filler is not None:
        filler.wait_at_exit(_filler, _rank, FILL_AT_EXIT)


class _HostMemory:
    """This job's two memory slots on this host (None where there is no /dev/shm), opened at their first commit.
    The first time /dev/shm refuses one (full), memory is given up: commits go to disk in line from then on."""

    def __init__(self, folder):
        self.folder = folder
        self.given_up = folder is None
        self._slots = [None, None]

    def slot(self, sequence):
        """The slot of commit ``sequence``, or None where commits do not go to memory."""
        index = sequence % 2
        if self._slots[index] is None and not self.given_up:
            try:
                os.makedirs(self.folder, exist_ok=True)
                self._slots[index] = memory_slots.MemorySlot(_slot_paths(self.folder)[index])
            except OSError as error:
                self.give_up(error)
        return self._slots[index] if not self.given_up else None

    def give_up(self, error):
        self.given_up = True
        print(f"[hvdlite rank {basics.rank()}] elastic: cannot keep commits in {self.folder} ({error}); writing them "
              f"to disk in line instead", file=sys.stderr, flush=True)

    def close(self):
        for slot in self._slots:
            if slot is not None:
                slot.close()
        self._slots = [None, None]


_memories = {}  # memory folder -> _HostMemory, for the job


def host_memory():
    """This job's _HostMemory on this host."""
    folder = memory_directory()
    memory = _memories.get(folder)
    if memory is None:
        memory = _memories[folder] = _HostMemory(folder)
    return memory


def memory_arrays(sequence, specs, span=False):
    """NumPy arrays in this host's memory, one per (dtype string, shape) of ``specs``, for a state to copy its
    arrays into before ``write(sequence, payload)`` with an ArrayBlock of them, which then copies them no more; None
    where commits do not go to memory (or it is full). With ``span``: (the arrays, one uint8 array over all of
    them: MemorySlot.span)."""
    wait_filled()  # this slot's commit is cleared now: the other one must hold a whole commit first
    memory = host_memory()
    slot = memory.slot(sequence)
    if slot is None:
        return None
    try:
        arrays = slot.arrays_for(specs)
    except OSError as error:
        memory.give_up(error)
        return None
    return (arrays, slot.span()) if span else arrays


def write(sequence, payload):
    """Stores commit ``sequence`` (a picklable object; its arrays may be the live state's, which is copied before
    this returns) in this host's memory, in line, and has the background thread copy it to disk. Returns True when
    it is in memory (read_memory gives it back), False when it went to disk in line instead."""
    wait_filled()
    _first_commit_here()
    return _store(sequence, *pickled(payload))


def write_filled_later(sequence, payload, fill):
    """Stores commit ``sequence`` as ``write`` does, in the background: its arrays, which ``memory_arrays`` gave,
    are written by ``fill()`` on another thread (filler.py); the rest is pickled here. Waits for the commit
    before it first."""
    global _filler
    _first_commit_here()
    if _filler is None:
        _filler = filler.Filler(_store)
    _filler.submit(sequence, *pickled(payload), fill)


def wait_filled():
    """Until a commit handed to write_filled_later is in this host's memory; raises what filling it raised."""
    if _filler is not None:
        _filler.wait()


def _store(sequence, data, views):
    """write's second half: the pickled commit into its memory slot (and, in the background, to disk), or to disk
    in line where memory is not used."""
    global _writer
    memory = host_memory()
    slot = memory.slot(sequence)  # the one whose arrays memory_arrays handed out for this commit, if it was asked
    if slot is not None:
        try:
            slot.store(sequence, data, views)
        except OSError as error:
            memory.give_up(error)
        else:
            _writer = _writer or _DiskWriter()
            _writer.submit(sequence, slot.path)
            return True
    flush()
    write_to_disk(sequence, parts(data, views))
    return False


def read_memory(sequence):
    """The payload of commit ``sequence`` from this host's memory (one of the two newest there)."""
    wait_filled()
    folder = memory_directory()
    for path in _slot_paths(folder) if folder else ():
        slot = memory_slots.read(path)
        if slot is not None and slot[0] == sequence:
            return decode(slot[1])
    raise HorovodInternalError(f"elastic: commit {sequence} is no longer in {folder}")


@functools.lru_cache(maxsize=8)
def _slot_paths(folder):
    return tuple(os.path.join(folder, f"slot-{index}") for index in (0, 1))


def write_to_disk(sequence, parts):
    """Writes commit ``sequence`` to the commit directory, fsyncs it and the directory, then removes the disk
    commits older than the newest KEEP; returns its path."""
    folder = directory()
    os.makedirs(folder, exist_ok=True)
    final = os.path.join(folder, f"commit-{sequence:012d}.pkl")
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    _write_atomically(folder, final, [MAGIC + digest.digest(), *parts])
    _fsync(final)
    _fsync(folder)  # the rename
    for older in sorted(_commit_files(folder))[:-KEEP]:
        os.unlink(older)
    return final


def _write_atomically(folder, final, parts):
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".commit-", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as stream:
            for part in parts:
                stream.write(part)
        os.replace(temporary, final)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def flush():
    """Waits until every commit written here is on disk and durable (before a job removes its commits, and in
    tests)."""
    wait_filled()
    if _writer is not None:
        _writer.wait()


def _fsync(path):
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _commit_files(folder):
    return glob.glob(os.path.join(folder, "commit-*.pkl"))


def _sequence_of(path):
    return int(os.path.basename(path)[len("commit-"):-len(".pkl")])


def read_verified(path):
    """The body of a disk commit (``decode`` reads it), or None when it is damaged: a wrong magic or checksum."""
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
    """(sequence, body) of this host's newest intact commit, in memory or on disk, or (-1, None); damaged disk
    commits are reported and skipped."""
    wait_filled()
    folder = memory_directory()
    slots = [memory_slots.read(path) for path in _slot_paths(folder)] if folder else []
    newest = max((slot for slot in slots if slot), default=(-1, None), key=lambda slot: slot[0])
    for path in sorted(_commit_files(directory()), key=_sequence_of, reverse=True):
        if _sequence_of(path) <= newest[0]:
            break
        data = read_verified(path)
        if data is not None:
            return _sequence_of(path), data
        print(f"[hvdlite rank {basics.rank()}] elastic: commit {path} is damaged; using an older one",
              file=sys.stderr, flush=True)
    return newest


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
    """Deletes this host's commits, in memory and on disk (a finished job cleans up after itself)."""
    flush()
    for memory in _memories.values():
        memory.close()
    _memories.clear()
    commit_folders.remove_here()
