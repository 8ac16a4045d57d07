"""The integer handles users see (as in Horovod), and synchronize / poll on them.

They are the NumPy API's int handles (native/python/int_handles.c): one table, so a torch handle and a NumPy one
never share a number. A CPU tensor's all-reduce goes through the NumPy API's C path (async_ops.py) and its
handle holds the result array, made a tensor here. Any other operation may stand for several core handles (a
grouped operation, a GPU tensor staged on the host): a CompositeWork (hvdlite/work.py), whose result turns the
finished core handles into the user's (copy out, copy back to a GPU, ...). The tensors the core reads and writes
are kept alive by the core handles' keepalive until they are released.
"""
import numpy as np

from hvdlite import _tensor_calls
from hvdlite.errors import HorovodInternalError
from hvdlite.work import CompositeWork, Work

from . import staging


class CallableWork(CompositeWork):
    """A CompositeWork that is also what Horovod's sparse_allreduce_async returns: a callable that waits, returns
    the result and releases."""

    __slots__ = ()

    def __call__(self):
        try:
            self.wait()
            return self.result()
        finally:
            self.release()


class HorovodHandleWork(Work):
    """A Work (hvdlite/work.py) over one of Horovod's int handles, what this adapter's async collectives return:
    an int handle is given back by synchronize only, which waits; the result (or the error) is kept."""

    __slots__ = ("handle", "_done", "_result", "_error")

    def __init__(self, handle):
        self.handle = handle
        self._done, self._result, self._error = False, None, None

    def wait(self):
        if not self._done:
            try:
                self._result = synchronize(self.handle)
            except HorovodInternalError as error:
                self._error = error
            self._done = True
        if self._error is not None:
            raise self._error

    def poll(self):
        return self._done or poll(self.handle)

    def result(self):
        return self._result

    def exception(self):
        return self._error

    def release(self):
        if not self._done:
            try:
                self.wait()
            except HorovodInternalError:
                pass  # kept: exception() tells it


def register(core_handles, build):
    """Records an operation; ``build(core_handles)`` makes its result once every core handle is done."""
    return _tensor_calls.track(CompositeWork(core_handles, build), CompositeWork.result)


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
