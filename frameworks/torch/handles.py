"""The table of in-flight operations behind the integer handles users see (as in Horovod).

One user handle may stand for several core handles (a grouped operation). Each entry knows how to turn the
finished core handles into the user's result (copy out, copy back to a GPU, ...). The tensors the core reads
and writes are kept alive by the core handles' keepalive until they are released here.
"""
import itertools
import threading

from hvdlite.requests import release_all, wait_all

_lock = threading.Lock()
_ids = itertools.count(1)
_pending = {}


class _Operation:
    __slots__ = ("core_handles", "finish")

    def __init__(self, core_handles, finish):
        self.core_handles = core_handles
        self.finish = finish


def register(core_handles, finish):
    """Records an operation; ``finish(core_handles)`` builds its result once every core handle is done."""
    op = _Operation(list(core_handles), finish)
    with _lock:
        handle = next(_ids)
        _pending[handle] = op
    return handle


def poll(handle):
    """True when the operation behind ``handle`` has finished (``synchronize`` will not block)."""
    with _lock:
        op = _pending.get(handle)
    if op is None:
        raise ValueError(f"unknown handle {handle!r}: it was never returned or is already synchronized")
    return all(h.poll() for h in op.core_handles)


def synchronize(handle):
    """Waits for the operation and returns its result; raises the core's error (HorovodInternalError).

    Every core handle of the operation is waited for before any is released, so that the core never writes
    into memory that has been given back.
    """
    with _lock:
        op = _pending.pop(handle, None)
    if op is None:
        raise ValueError(f"unknown handle {handle!r}: it was never returned or is already synchronized")
    try:
        wait_all(op.core_handles)
        return op.finish(op.core_handles)
    finally:
        release_all(op.core_handles)


def in_flight():
    """The number of operations not yet synchronized (for tests and diagnostics)."""
    with _lock:
        return len(_pending)
