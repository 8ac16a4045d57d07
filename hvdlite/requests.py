"""The pointer-level entry of the core, for adapters: a Request in, a Handle out.

Adapters turn their tensors into (address, dtype, shape) and keep them alive through ``keepalive``;
nothing here copies tensor data.
"""
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import ml_dtypes
import numpy as np

from . import _native, _tensor_calls  # _native first: it loads the core that _tensor_calls links against
from ._native import error_buffer, error_text, ffi, lib
from .errors import HvdliteError
from .process_sets import ProcessSet, global_process_set
from .work import Work


class Collective:
    ALLREDUCE = lib.HVDLITE_ALLREDUCE
    ALLGATHER = lib.HVDLITE_ALLGATHER
    BROADCAST = lib.HVDLITE_BROADCAST
    ALLTOALL = lib.HVDLITE_ALLTOALL
    REDUCESCATTER = lib.HVDLITE_REDUCESCATTER
    BARRIER = lib.HVDLITE_BARRIER
    JOIN = lib.HVDLITE_JOIN


class ReduceOp:
    """The core's reduce ops (enum hvdlite_reduce_op); Horovod's hvd.Average, hvd.Sum, ... are these numbers."""
    AVERAGE = lib.HVDLITE_OP_AVERAGE
    SUM = lib.HVDLITE_OP_SUM
    ADASUM = lib.HVDLITE_OP_ADASUM
    MIN = lib.HVDLITE_OP_MIN
    MAX = lib.HVDLITE_OP_MAX
    PRODUCT = lib.HVDLITE_OP_PRODUCT


DTYPES = {
    "uint8": lib.HVDLITE_UINT8, "int8": lib.HVDLITE_INT8, "int16": lib.HVDLITE_INT16,
    "int32": lib.HVDLITE_INT32, "int64": lib.HVDLITE_INT64, "float16": lib.HVDLITE_FLOAT16,
    "bfloat16": lib.HVDLITE_BFLOAT16, "float32": lib.HVDLITE_FLOAT32, "float64": lib.HVDLITE_FLOAT64,
    "bool": lib.HVDLITE_BOOL, "uint16": lib.HVDLITE_UINT16,
}
_NUMPY_DTYPE_NAMES = {np.dtype(name): name for name in DTYPES if name != "bfloat16"}
_NUMPY_DTYPE_NAMES[np.dtype(ml_dtypes.bfloat16)] = "bfloat16"


def dtype_name(dtype):
    """The core's name for a NumPy dtype (a dict lookup: ``dtype.name`` costs microseconds per call).

    Types the core does not carry keep their NumPy name, and submitting them raises TypeError naming the tensor.
    """
    name = _NUMPY_DTYPE_NAMES.get(dtype)
    return name if name is not None else np.dtype(dtype).name


def address(array):
    """A C pointer to a contiguous array's data, for Request.input_ptr/output_ptr (cheaper than
    ``array.ctypes.data``); it keeps the array alive."""
    return ffi.from_buffer(array)

_name_counters = {}


def auto_name(kind, process_set=None):
    """A name for an unnamed tensor; equal on every rank that calls collectives in the same order.

    Counted per process set: ranks outside a set do not advance its counter, so the names of the
    global set (and of every other set) stay equal on all of its ranks.
    """
    set_id = process_set.process_set_id if process_set is not None else 0
    counter = _name_counters.setdefault((kind, set_id), itertools.count())
    prefix = kind if not set_id else f"{kind}.set{set_id}"
    return f"{prefix}.noname.{next(counter)}"


@dataclass(slots=True)
class Request:
    collective: int
    name: str
    dtype: str
    shape: Sequence[int]
    input_ptr: Any = 0    # an int address, or a cffi pointer (address())
    output_ptr: Any = 0
    op: int = 0
    prescale_factor: float = 1.0
    postscale_factor: float = 1.0
    root_rank: int = 0
    splits: Optional[Sequence[int]] = None
    process_set: ProcessSet = global_process_set
    keepalive: Any = ()
    gpu: Any = None  # GPU tensors: (device ordinal, CUstream address of the stream that wrote them)


# One submitted request: wait (or poll), read the output, then release (or finish: both in one call). A C type
# (native/python/core_handles.c): a training step finishes one per gradient, and a Python subclass would be
# garbage-collected.
Handle = _tensor_calls.Handle
_tensor_calls.configure_requests(DTYPES, global_process_set)
_submit_request = _tensor_calls.submit_request
_submit_and_wait_request = _tensor_calls.submit_and_wait_request


# The hot path of every collective: names and shapes repeat step after step (gradients), so their C
# copies are cached; the error buffer is only read on failure, so one per thread is reused.
_C_NAMES = {}
_C_SHAPES = {}
_CACHE_LIMIT = 8192
_thread_state = threading.local()


def cached(cache, key, make, limit=_CACHE_LIMIT):
    """cache[key], made by make() when missing. Bounded by emptying it when full: the keys of a training
    loop repeat, so it refills with what is in use."""
    value = cache.get(key)
    return value if value is not None else remember(cache, key, make(), limit)


def remember(cache, key, value, limit=_CACHE_LIMIT):
    """Sets cache[key] = value (emptying the cache first when it is full, as cached does); returns value."""
    if len(cache) >= limit and key not in cache:
        cache.clear()
    cache[key] = value
    return value


def _c_name(name):
    return cached(_C_NAMES, name, lambda: ffi.new("char[]", name.encode()))


def _c_shape(shape):
    key = tuple(shape)
    return cached(_C_SHAPES, key, lambda: ffi.new("int64_t[]", [int(d) for d in key] or [0])), len(key)


def _error_buffer():
    buffer = getattr(_thread_state, "error_buffer", None)
    if buffer is None:
        buffer = _thread_state.error_buffer = error_buffer()
    return buffer


_CData = ffi.CData


def _pointer(value):
    return value if isinstance(value, _CData) else ffi.cast("void *", value)


def _fill(c_request, request, owned):
    dtype = DTYPES.get(request.dtype)
    if dtype is None:
        raise TypeError(f"hvdlite does not support dtype {request.dtype!r} (tensor '{request.name}'); "
                        f"supported: {', '.join(DTYPES)}")
    name = _c_name(request.name)
    shape, ndim = _c_shape(request.shape)
    owned.append((name, shape))  # the caches may drop them; the call must not
    c_request.collective = request.collective
    c_request.name = name
    c_request.dtype = dtype
    c_request.ndim = ndim
    c_request.shape = shape
    c_request.input = _pointer(request.input_ptr)
    c_request.output = _pointer(request.output_ptr)
    c_request.reduce_op = request.op
    c_request.prescale_factor = request.prescale_factor
    c_request.postscale_factor = request.postscale_factor
    c_request.root_rank = request.root_rank
    c_request.process_set_id = request.process_set._id()
    if request.gpu is not None:
        c_request.gpu = 1
        c_request.gpu_device, stream = request.gpu
        c_request.gpu_stream = ffi.cast("void *", stream)
    if request.splits is not None:
        splits = [int(s) for s in request.splits]
        if len(splits) != request.process_set.size():
            raise ValueError(f"alltoall of '{request.name}': splits needs one entry per rank of the process set "
                             f"({request.process_set.size()}), got {len(splits)}")
        c_splits = ffi.new("int32_t[]", splits)
        owned.append(c_splits)
        c_request.splits = c_splits


def _raise_for(code, buffer):
    message = error_text(buffer)
    if code == -3:
        raise HvdliteError(message)
    raise ValueError(message)


def _filled_group(requests):
    """The requests' C array, and what it points to (hold both until the core has copied them)."""
    c_requests = ffi.new("hvdlite_request[]", max(len(requests), 1))
    owned = []
    for c_request, request in zip(c_requests, requests):
        _fill(c_request, request, owned)
    return c_requests, owned


def _enqueue_group(c_requests, count):
    """Submits count filled requests in one call; returns the C array of their handle ids."""
    ids = ffi.new("hvdlite_handle[]", max(count, 1))
    buffer = _error_buffer()
    code = lib.hvdlite_enqueue_group(c_requests, count, ids, buffer, len(buffer))
    if code != 0:
        _raise_for(code, buffer)
    return ids


def submit_group(requests):
    """Submits requests that run together (fused where their types allow); returns their handles."""
    if not requests:
        return []
    if len(requests) == 1:
        return [submit(requests[0])]
    c_requests, _owned = _filled_group(requests)
    ids = _enqueue_group(c_requests, len(requests))
    return [Handle(ids[i], r.keepalive, r.name) for i, r in enumerate(requests)]


# wait_all(handles): waits for every handle (one C call, one wake-up for a fused group); then raises
# HvdliteError for the first that failed, if any. Release them all afterwards either way.
wait_all = _tensor_calls.wait_all
# release_all(handles): releases every handle not released yet.
release_all = _tensor_calls.release_all


def _filled(request):
    """The request's C form, and what it points to (hold both until the core has copied them)."""
    c_request = ffi.new("hvdlite_request *")  # zeroed: splits stays NULL unless set
    owned = []
    _fill(c_request, request, owned)
    return c_request, owned


def _prepare(c_request):
    """Registers a filled request with the core (hvdlite_prepare), which then takes it by token: no name copied,
    hashed or checked per submission. Returns the token, stored in the request too; 0 where the core does not
    run or refuses it (the request then goes by value, and a refusal is raised when it is submitted)."""
    token = lib.hvdlite_prepare(c_request, ffi.NULL, 0)
    if token <= 0:
        return 0
    c_request.prepared = token
    return token


def _unprepare(tokens):
    try:
        for token in tokens:
            if token:
                lib.hvdlite_unprepare(token)
    except (AttributeError, TypeError):  # the interpreter is shutting down: the core goes with it
        pass


def _address(c_pointer):
    return int(ffi.cast("uintptr_t", c_pointer))


def _enqueue(c_request, keepalive, name):
    return _tensor_calls.enqueue(_address(c_request), keepalive, name)


def submit(request):
    """Submits one request; returns its Handle at once."""
    handle = _submit_request(request)  # the usual request, filled in C; None: one that needs _fill's checks
    if handle is not None:
        return handle
    c_request, _owned = _filled(request)
    return _enqueue(c_request, request.keepalive, request.name)


class PreparedRequest(_tensor_calls.PreparedRequestBase):
    """A request filled into its C form once, then submitted again and again with new buffers: what an
    optimizer does with a parameter's gradient every step. Each submit sets two pointers and makes one C
    call, instead of rebuilding the request (the per-gradient cost of a training step); the core knows it by
    a token (hvdlite_prepare) while this object lives.

    ``submit(input, output, keepalive)`` submits with these buffers (integer addresses, or contiguous arrays;
    same dtype and shape as prepared) kept alive by keepalive and returns the Handle at once;
    ``submit_and_wait`` (same arguments) also waits, as ``submit_and_wait()``. Both are C methods
    (``native/python/prepared_request.c``): no Python frame per gradient.
    """

    __slots__ = ("_c", "_owned", "_token")

    def __init__(self, request):
        self._token = 0
        self._c, self._owned = _filled(request)
        self._owned.append(request.keepalive)
        self._address = _address(self._c)  # what the C methods submit: held by self._c
        self.name = request.name
        self._token = _prepare(self._c)

    def __del__(self):
        _unprepare((getattr(self, "_token", 0),))


class GroupHandle(Work):
    """The handles of a group submitted in one call, kept as the C array the core filled: waiting and
    releasing are one C call each, with no Python object per member. A Work (hvdlite/work.py)."""

    __slots__ = ("_ids", "_count", "_names", "_keepalive")

    def __init__(self, ids, count, names, keepalive):
        self._ids, self._count, self._names, self._keepalive = ids, count, names, keepalive

    def poll(self):
        return bool(lib.hvdlite_all_done(self._ids, self._count))

    def wait(self):
        """Waits for every member; then raises HvdliteError for the first that failed, if any."""
        code = lib.hvdlite_wait_all(self._ids, self._count)
        if code > 0:
            _tensor_calls.raise_handle_error(self._ids[code - 1], self._names[code - 1])
        if code < 0:
            raise HvdliteError("wait: the group was already released")

    def result(self):
        return None  # a group of requests whose outputs are the callers' buffers

    def exception(self):
        """The first failed member's HvdliteError (not raised), or None: all done well, or not all done."""
        if not self.poll():
            return None
        try:
            self.wait()  # done: does not block
        except HvdliteError as error:
            return error
        return None

    def release(self):
        if self._keepalive is not None:
            lib.hvdlite_release_all(self._ids, self._count)
            self._keepalive = None

    def __del__(self):
        if getattr(self, "_keepalive", None) is not None and lib.hvdlite_all_done(self._ids, self._count):
            self.release()


class PreparedGroup:
    """Requests filled into their C form once, then submitted together again and again (with new buffers
    or the same): what a training step does with the same gradients every step. A submission sets two
    pointers per member at most and makes one C call, instead of rebuilding every request."""

    __slots__ = ("_c", "_owned", "_names", "_count", "_address", "_kept", "_tokens")

    def __init__(self, requests):
        self._tokens = ()
        self._count = len(requests)
        self._c, self._owned = _filled_group(requests)
        self._owned.extend(r.keepalive for r in requests)
        self._names = [r.name for r in requests]
        self._address = _address(self._c)
        self._kept = [None] * (self._count * _tensor_calls.KEPT_OUTPUTS)  # point_arrays' outputs, to recycle
        self._tokens = tuple(_prepare(self._c + i) for i in range(self._count))

    def __del__(self):
        _unprepare(getattr(self, "_tokens", ()))

    def point_arrays(self, arrays, op, prescale_factor, postscale_factor, process_set):
        """Points the members at arrays (NumPy, C-contiguous, one per member) and at output arrays, which it
        returns (new, or earlier outputs that nobody holds any more); None, pointing nothing that matters, when
        the arrays or the all-reduce arguments are not what the members were prepared with. One C call."""
        return _tensor_calls.point_arrays(self._address, self._count, arrays, op, prescale_factor,
                                          postscale_factor, process_set, self._kept)

    def submit(self, inputs=None, outputs=None, keepalive=None):
        """Submits every member; inputs and outputs, if given, hold one buffer per member (integer addresses
        or contiguous arrays, same dtypes and shapes as prepared; set in one C call) and keepalive what holds
        them. Returns a GroupHandle."""
        if inputs is not None:
            _tensor_calls.point_group(self._address, inputs, outputs, self._names)
        ids = _enqueue_group(self._c, self._count)
        return GroupHandle(ids, self._count, self._names, keepalive if keepalive is not None else self._owned)


def submit_and_wait(request):
    """Submits one request and waits for it (a synchronous collective); returns its finished Handle.

    Faster than submit() + wait() for a request nothing else is batched with: the background thread
    starts the round at once instead of holding the queue open for more submissions.
    Raises HvdliteError if the collective failed (the handle is released then).
    """
    handle = _submit_and_wait_request(request)  # filled in C, as submit
    if handle is not None:
        return handle
    c_request, _owned = _filled(request)
    buffer = _error_buffer()
    c_handle = ffi.new("hvdlite_handle *")
    code = lib.hvdlite_enqueue_and_wait(c_request, c_handle, buffer, len(buffer))
    if code < 0:
        _raise_for(code, buffer)
    handle = Handle(c_handle[0], request.keepalive, request.name)
    if code != 0:
        try:
            handle.raise_error()
        finally:
            handle.release()
    return handle


_ = _native  # the module keeps the library loaded for the lifetime of handles
