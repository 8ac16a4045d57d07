"""The integer handles users see (as in Horovod), and synchronize / poll on them.

They are the NumPy API's int handles (native/python/int_handles.c): one table, so a torch handle and a NumPy one
never share a number. A CPU tensor's all-reduce goes through the NumPy API's C path (async_ops.py) and its
handle holds the result array, made a tensor here. Any other operation may stand for several core handles (a
grouped operation, a GPU tensor staged on the host): an _Operation, which turns the finished core handles into
the user's result (copy out, copy back to a GPU, ...). The tensors the core reads and writes are kept alive by
the core handles' keepalive until they are released.
"""
import numpy as np

from hvdlite import _tensor_calls
from hvdlite.requests import release_all, wait_all

from . import staging


class _Operation:
    """What synchronize waits for, builds the result from, and releases: every core handle of the operation is
    waited for before any is released, so that the core never writes into memory that has been given back."""
    __slots__ = ("core_handles", "finish")

    def __init__(self, core_handles, finish):
        self.core_handles = core_handles
        self.finish = finish

    def wait(self):
        wait_all(self.core_handles)

    def release(self):
        release_all(self.core_handles)

    def poll(self):
        return all(h.poll() for h in self.core_handles)

    def result(self, _):
        return self.finish(self.core_handles)


def register(core_handles, finish):
    """Records an operation; ``finish(core_handles)`` builds its result once every core handle is done."""
    op = _Operation(list(core_handles), finish)
    return _tensor_calls.track(op, op.result)


def _unknown(handle, error):
    if error.args == (handle,):  # the table's own KeyError, not one raised while building a result
        return ValueError(f"unknown handle {handle!r}: it was never returned or is already synchronized")
    return error


def poll(handle):
    """True when the operation behind ``handle`` has finished (``synchronize`` will not block)."""
    try:
        return _tensor_calls.poll(handle)
    except KeyError as error:
        raise _unknown(handle, error) from None


def synchronize(handle):
    """Waits for the operation and returns its result; raises the core's error (HorovodInternalError)."""
    try:
        result = _tensor_calls.synchronize(handle)
    except KeyError as error:
        raise _unknown(handle, error) from None
    return staging.tensor_of(result) if type(result) is np.ndarray else result


def in_flight():
    """The number of operations not yet synchronized, NumPy API's included (for tests and diagnostics)."""
    return _tensor_calls.pending_handles()
