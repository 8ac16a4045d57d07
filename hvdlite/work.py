"""Every pending operation is a Work, as in c10d: the core's ``Handle`` (native/python/core_handles.c), a group's
``GroupHandle`` (native/python/prepared_group.c) and what an adapter builds out of several of them (``CompositeWork``) answer the same
calls:

    wait()       blocks until done (without the GIL); raises the error the operation failed with
    poll()       True once done, well or not
    result()     what the operation gives back once done, read before release (None where it gives nothing back)
    exception()  the error it failed with (an HvdliteError, not raised), or None: done well, or not done yet
    release()    gives back what it holds (the core's state, the memory kept alive); again: nothing
    finish()     wait, then release whatever happened (raises as wait does)

Horovod's int handles (``hvdlite.allreduce_async``, ``hvdlite.torch``'s) are numbers for Works in one table
(native/python/int_handles.c): ``synchronize(handle)`` waits for the Work, takes its result and releases it.
"""
from . import _native, _tensor_calls  # _native first: it loads the core that _tensor_calls links against


class Work:
    """What every Work written in Python shares (Handle and GroupHandle have their own, in C)."""

    __slots__ = ()

    def finish(self):
        try:
            self.wait()
        finally:
            self.release()


class CompositeWork(Work):
    """An operation made of several core handles (a grouped collective, a tensor staged through host memory): done
    when all are, its result ``build(handles)``, made once every handle is done and before any is released, so that
    the core never writes into memory that has been given back."""

    __slots__ = ("handles", "build")

    def __init__(self, handles, build):
        self.handles = list(handles)
        self.build = build

    def wait(self):
        _tensor_calls.wait_all(self.handles)

    def poll(self):
        return all(h.poll() for h in self.handles)

    def result(self):
        return self.build(self.handles)

    def exception(self):
        for handle in self.handles:
            error = handle.exception()
            if error is not None:
                return error
        return None

    def release(self):
        _tensor_calls.release_all(self.handles)
