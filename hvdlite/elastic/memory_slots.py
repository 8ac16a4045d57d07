"""A host's commits in its memory: two slot files in a folder under /dev/shm, mapped into the rank that writes
them, each commit written in line by ``commit()`` into the slot of the commit before the last.

A slot is its header (magic, sequence, the body's length) and a commit's body (commit_body.py). Writing one, the
header is cleared first and written last, so a slot holds a whole commit or is skipped. Kept by the kernel, the
slots outlive every process of the job: a rank killed right after ``commit()`` returned loses nothing.

A state may ask for arrays inside the slot (``arrays_for``) and copy its tensors there itself, in one call of its
framework; ``store`` then copies only what is not in place yet: a commit costs one memory copy of the state.
"""
import math
import mmap
import os
import struct

import numpy as np

from . import commit_body

HEADER = struct.Struct("<8sQQ")
MAGIC = b"HVDLMEM1"
_CLEARED = bytes(HEADER.size)
READ_CHUNK = 1 << 20  # bytes read at a time: see read()


class MemorySlot:
    """One slot file, open and mapped for the job (its pages are reused by every commit of the same size)."""

    def __init__(self, path):
        self.path = path
        self._descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._map = None
        self._size = 0
        self._arrays = (None, [], None)  # (specs, arrays, their span) of the last arrays_for
        self._pickle_room = 4096   # room left after the arrays for the pickle (grows to the largest seen)
        self._map_to(os.fstat(self._descriptor).st_size)

    def _map_to(self, size):
        # The old map is not closed: arrays handed out may still view it; it goes with the last of them.
        self._map = mmap.mmap(self._descriptor, size) if size else None
        self._size = size
        self._arrays = (None, [], None)

    def _reserve(self, size):
        # Grown first (ENOSPC here, where /dev/shm is full, rather than SIGBUS on a write), never shrunk: the header
        # tells the length, and the pages stay for the next commit of this size.
        if self._size < size:
            os.posix_fallocate(self._descriptor, 0, size)
            self._map_to(size)

    def _clear(self):
        if self._map is not None:
            self._map[:HEADER.size] = _CLEARED

    def arrays_for(self, specs):
        """NumPy arrays inside this slot, one per (dtype, shape) of ``specs``, where the arrays of the next
        ``store`` go: filled by the caller first, they are then not copied again. From here on the slot holds no
        commit. The same arrays come back while ``specs`` stay the same."""
        self._clear()
        if self._arrays[0] != specs:
            dtypes = [np.dtype(dtype) for dtype, _ in specs]
            sizes = [dtype.itemsize * math.prod(shape) for dtype, (_, shape) in zip(dtypes, specs)]
            offsets, at = commit_body.layout(sizes)
            self._reserve(HEADER.size + at + self._pickle_room)
            arrays = [np.ndarray(shape, dtype, buffer=self._map, offset=HEADER.size + offset)
                      for dtype, (_, shape), offset in zip(dtypes, specs, offsets)]
            first = offsets[0] if offsets else at
            span = np.ndarray(at - first, np.uint8, buffer=self._map, offset=HEADER.size + first)
            self._arrays = (specs, arrays, span)
        return self._arrays[1]

    def span(self):
        """The bytes from the first array of the last ``arrays_for`` to the end of its last, padding included (laid
        out as commit_body.layout says): one copy can fill them all."""
        return self._arrays[2]

    def store(self, sequence, data, views):
        """Writes commit ``sequence``: its pickle and its arrays' memory (commit_body.pickled); arrays that are
        those of ``arrays_for``, in the same order, are in place already."""
        self._clear()
        handed = self._arrays[1]
        in_place = [index < len(handed) and view.obj is handed[index] for index, view in enumerate(views)]
        if handed and not all(in_place):
            # Some of them view this slot elsewhere than where they go: read out before anything is written.
            views = [view if placed else memoryview(bytes(view)) for view, placed in zip(views, in_place)]
        offsets, at = commit_body.layout([view.nbytes for view in views])
        length = at + len(data)
        self._pickle_room = max(self._pickle_room, len(data))
        self._reserve(HEADER.size + length)
        target, base = self._map, HEADER.size
        head = commit_body.prefix(data, views)
        target[base:base + len(head)] = head
        for view, offset, placed in zip(views, offsets, in_place):
            if not placed:
                target[base + offset:base + offset + view.nbytes] = view
        target[base + at:base + length] = data
        target[:HEADER.size] = HEADER.pack(MAGIC, sequence, length)

    def close(self):
        os.close(self._descriptor)
        self._map = None
        self._arrays = (None, [], None)


def read(path):
    """(sequence, body) of the slot at ``path``, or None when it holds no whole commit: the header is read before
    and after the body, so a slot rewritten meanwhile (its header cleared first) is never taken for the one it was.

    Read through a map, a chunk at a time, each while holding the interpreter's lock, as the writer clears the
    header: in another thread of the writing process (the disk writer), whatever of a newer commit a chunk shows
    was written after that clear, which the last header read then sees, on any processor's memory order."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(descriptor).st_size
        if size < HEADER.size:
            return None
        with mmap.mmap(descriptor, size, prot=mmap.PROT_READ) as source:
            header = source[:HEADER.size]
            magic, sequence, length = HEADER.unpack(header)
            if magic != MAGIC or HEADER.size + length > size:
                return None
            body = bytearray(length)
            with memoryview(source) as whole, memoryview(body) as into:
                for start in range(0, length, READ_CHUNK):
                    end = min(length, start + READ_CHUNK)
                    into[start:end] = whole[HEADER.size + start:HEADER.size + end]
            if source[:HEADER.size] != header:
                return None
    except (OSError, ValueError):
        return None
    finally:
        os.close(descriptor)
    return sequence, body
