"""numpy-level collectives with Horovod's names and arguments, usable from any framework.

Async variants return an integer handle; ``synchronize(handle)`` returns the result (or raises) and
frees the handle; ``poll(handle)`` tells whether it finished.
"""
import itertools
import pickle
import warnings

import numpy as np

from .basics import _require_init
from .process_sets import global_process_set
from .requests import (Collective, PreparedGroup, PreparedRequest, Request, address, auto_name, cached, dtype_name,
                       run, submit)

Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5

_pending = {}  # int handle -> (Handle, function turning it into the result)
_handle_ids = itertools.count(1)


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule: ``op`` wins; the deprecated ``average`` maps True/False to Average/Sum; default Average."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def check_op(op):
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction is not implemented in hvdlite yet; use Average or Sum.")
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError(f"unknown reduce op {op!r}")
    return op


def resolve_op(op, average):
    return check_op(handle_average_backwards_compatibility(op, average))


def reducescatter_rows(dim0, set_size, set_rank):
    """Rows a rank receives from reducescatter: the first dim0 % size ranks get one extra."""
    return dim0 // set_size + (1 if set_rank < dim0 % set_size else 0)


def _submitted(request_and_finish):
    request, finish = request_and_finish
    return submit(request), finish


def _track(handle, finish):
    handle_id = next(_handle_ids)
    _pending[handle_id] = (handle, finish)
    return handle_id


def poll(handle_id):
    """True when the request behind handle_id has finished."""
    return _pending[handle_id][0].poll()


def synchronize(handle_id):
    """Waits for handle_id and returns its result; raises HvdliteError if the collective failed."""
    handle, finish = _pending.pop(handle_id)
    try:
        handle.wait()
        return finish(handle)
    finally:
        handle.release()


def _run(request, finish):
    """A synchronous collective: one call submits and waits (no coalescing window); returns finish(handle)."""
    handle = run(request)
    try:
        return finish(handle)
    finally:
        handle.release()


def _core_output(handle, dtype):
    shape = handle.output_shape()
    return handle.output_buffer().view(dtype).reshape(shape).copy()


# Named all-reduces repeat step after step with the same dtype and shape: their C requests are filled once
# and resubmitted with each call's arrays (bounded: see requests.cached).
_PREPARED_REQUESTS = {}


def _prepared_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set):
    """(PreparedRequest, input array, new output array) of an all-reduce; the request is cached for a named
    tensor, made afresh for an unnamed one."""
    array = np.ascontiguousarray(tensor)
    output = np.empty_like(array)

    def make():
        return PreparedRequest(Request(Collective.ALLREDUCE, name or auto_name("allreduce", process_set),
                                       dtype_name(array.dtype), array.shape, op=op, prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor, process_set=process_set))
    if not name:
        return make(), array, output
    key = (name, process_set.process_set_id, op, prescale_factor, postscale_factor, array.dtype, array.shape)
    return cached(_PREPARED_REQUESTS, key, make), array, output


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    _require_init()
    op = resolve_op(op, average)
    prepared, array, output = _prepared_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set)
    return _track(prepared.submit(array, output, (array, output)), lambda handle: output)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Reduces tensor over all ranks of the process set; returns a new array."""
    _require_init()
    op = resolve_op(op, average)
    prepared, array, output = _prepared_allreduce(tensor, name, op, prescale_factor, postscale_factor, process_set)
    prepared.run(array, output, (array, output)).release()
    return output


# Prepared groups of named grouped all-reduces: a training loop submits the same names, dtypes and shapes
# every step, so their C requests are filled once (bounded: cleared when full).
_PREPARED_GROUPS = {}
_PREPARED_GROUPS_LIMIT = 256


def _prepared_group(name, arrays, op, prescale_factor, postscale_factor, process_set):
    def make():
        base = name or auto_name("grouped_allreduce", process_set)
        return PreparedGroup([Request(Collective.ALLREDUCE, f"{base}.{i}", dtype_name(a.dtype), a.shape, 0, 0,
                                      op, prescale_factor, postscale_factor, process_set=process_set)
                              for i, a in enumerate(arrays)])
    if not name:
        return make()
    key = (name, process_set.process_set_id, op, prescale_factor, postscale_factor,
           tuple((a.dtype, a.shape) for a in arrays))
    return cached(_PREPARED_GROUPS, key, make, _PREPARED_GROUPS_LIMIT)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    _require_init()
    op = resolve_op(op, average)
    arrays = [np.ascontiguousarray(t) for t in tensors]
    outputs = [np.empty_like(a) for a in arrays]
    prepared = _prepared_group(name, arrays, op, prescale_factor, postscale_factor, process_set)
    group = prepared.submit(arrays, outputs, (arrays, outputs))
    # One int handle for the group, as in Horovod: synchronize returns the list.
    return _track(group, lambda group: outputs)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set))


def _allgather_request(tensor, name, process_set):
    _require_init()
    array = np.ascontiguousarray(tensor)
    if array.ndim == 0:
        array = array.reshape(1)
    request = Request(Collective.ALLGATHER, name or auto_name("allgather", process_set), dtype_name(array.dtype),
                      array.shape, address(array), 0, process_set=process_set, keepalive=(array,))
    return request, lambda handle: _core_output(handle, array.dtype)


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _track(*_submitted(_allgather_request(tensor, name, process_set)))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension (which may differ by rank)."""
    return _run(*_allgather_request(tensor, name, process_set))


def _broadcast_request(tensor, root_rank, name, process_set):
    _require_init()
    array = np.ascontiguousarray(tensor)
    output = np.empty_like(array)
    request = Request(Collective.BROADCAST, name or auto_name("broadcast", process_set), dtype_name(array.dtype),
                      array.shape, address(array), address(output), root_rank=root_rank, process_set=process_set,
                      keepalive=(array, output))
    return request, lambda handle: output


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _track(*_submitted(_broadcast_request(tensor, root_rank, name, process_set)))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank."""
    return _run(*_broadcast_request(tensor, root_rank, name, process_set))


def _alltoall_request(tensor, splits, name, process_set):
    _require_init()
    array = np.ascontiguousarray(tensor)
    request = Request(Collective.ALLTOALL, name or auto_name("alltoall", process_set), dtype_name(array.dtype),
                      array.shape, address(array), 0,
                      splits=None if splits is None else list(np.asarray(splits).ravel()),
                      process_set=process_set, keepalive=(array,))

    def finish(handle):
        output = _core_output(handle, array.dtype)
        return output if splits is None else (output, np.asarray(handle.received_splits(), dtype=np.int32))
    return request, finish


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _track(*_submitted(_alltoall_request(tensor, splits, name, process_set)))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows to rank i; returns the received rows (and, with splits, how many came from each)."""
    return _run(*_alltoall_request(tensor, splits, name, process_set))


def _reducescatter_request(tensor, name, op, process_set, prescale_factor, postscale_factor):
    _require_init()
    op = resolve_op(op, None)
    array = np.ascontiguousarray(tensor)
    if array.ndim == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension")
    rows = reducescatter_rows(array.shape[0], process_set.size(), process_set.rank())
    output = np.empty((rows,) + array.shape[1:], dtype=array.dtype)
    request = Request(Collective.REDUCESCATTER, name or auto_name("reducescatter", process_set),
                      dtype_name(array.dtype), array.shape, address(array), address(output), op, prescale_factor,
                      postscale_factor, process_set=process_set, keepalive=(array, output))
    return request, lambda handle: output


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    return _track(*_submitted(_reducescatter_request(tensor, name, op, process_set, prescale_factor,
                                                     postscale_factor)))


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces over ranks and leaves each rank its slice of rows."""
    return _run(*_reducescatter_request(tensor, name, op, process_set, prescale_factor, postscale_factor))


def barrier(process_set=global_process_set):
    """Returns once every rank of the process set has reached it."""
    _require_init()
    request = Request(Collective.BARRIER, auto_name("barrier", process_set), "uint8", (), process_set=process_set)
    _run(request, lambda handle: None)


def join(process_set=global_process_set):
    """Signals that this rank has no more data: until every rank has joined, it contributes zeros to the
    others' allreduces. Returns the rank that joined last."""
    _require_init()
    request = Request(Collective.JOIN, "__hvdlite.join", "uint8", (), process_set=process_set)
    return _run(request, lambda handle: handle.result())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank and returns it on every rank."""
    name = name or auto_name("broadcast_object", process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if process_set.rank() == root_rank else None
    length = np.array([0 if payload is None else payload.size], dtype=np.int64)
    length = broadcast(length, root_rank, name=f"{name}.length", process_set=process_set)
    data = payload if payload is not None else np.empty(int(length[0]), dtype=np.uint8)
    data = broadcast(data, root_rank, name=f"{name}.data", process_set=process_set)
    return pickle.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickles obj on every rank; returns the list of all ranks' objects, in rank order."""
    name = name or auto_name("allgather_object", process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    lengths = allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.lengths", process_set=process_set)
    data = allgather(payload, name=f"{name}.data", process_set=process_set)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return [pickle.loads(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(lengths))]
