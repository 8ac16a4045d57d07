"""numpy-level collectives with Horovod's names and arguments, usable from any framework.

Async variants return an integer handle; ``synchronize(handle)`` returns the result (or raises) and
frees the handle; ``poll(handle)`` tells whether it finished.
"""
import pickle

import numpy as np

from . import _tensor_calls
from .basics import _require_init, rank
from .process_sets import global_process_set
from .requests import (Collective, PreparedGroup, ReduceOp, address, auto_name, describe, dtype_name,
                       output_shape, request_for, submit, submit_and_wait)

Average, Sum, Adasum, Min, Max, Product = (ReduceOp.AVERAGE, ReduceOp.SUM, ReduceOp.ADASUM, ReduceOp.MIN, ReduceOp.MAX,
                                           ReduceOp.PRODUCT)

# How many int handles are not synchronized yet. They live in a C table (native/python/int_handles.c), filled by
# _track and by the all-reduces in C.
pending_handles = _tensor_calls.pending_handles


def resolve_op(op, average):
    """Horovod's rule: ``op`` wins (ValueError for an op the core does not have); the deprecated ``average`` maps
    True/False to Average/Sum (with a DeprecationWarning at the caller's caller); neither: Average. ValueError when
    both are given. In C (native/python/array_collectives.c), as hvd.allreduce applies it."""
    return _tensor_calls.resolve_op(op, average, 3)


# Horovod's public name for the same rule.
handle_average_backwards_compatibility = resolve_op


def check_op(op):
    """op itself when it is one of the core's reduce ops, else ValueError."""
    if op is None:
        raise ValueError("unknown reduce op None")
    return _tensor_calls.resolve_op(op, None)


# _contiguous(tensor): tensor as a C-contiguous array of at least one dimension in native byte order (the core reads
# native numbers; a byte-swapped array is converted, not summed as garbage). The C rule hvd.allreduce applies.
_contiguous = _tensor_calls.contiguous


def _submitted(request_and_finish):
    request, finish = request_and_finish
    return submit(request), finish


def _track(handle, result):
    """A new int handle for a submitted request; result is its output array, or a function of the finished
    handle that makes it."""
    return _tensor_calls.track(handle, result)


# poll(handle_id): True when the request behind handle_id has finished (KeyError for one already synchronized).
poll = _tensor_calls.poll


# synchronize(handle_id): waits for handle_id and returns its result; raises HvdliteError if the collective failed
# (KeyError for a handle already synchronized). In C: a training step makes it once per tensor.
synchronize = _tensor_calls.synchronize


def _run(request, finish):
    """A synchronous collective: one call submits and waits (no coalescing window); returns finish(handle)."""
    handle = submit_and_wait(request)
    try:
        return finish(handle)
    finally:
        handle.release()


def _core_output(handle, dtype):
    shape = handle.output_shape()
    return np.frombuffer(handle.output_buffer(), dtype).reshape(shape).copy()


# Named all-reduces repeat step after step with the same dtype and shape: their C requests are filled once, kept
# by name as a NamedAllreduce (native/python/named_allreduce.c: a copy of the C request, the PreparedRequest, its
# last outputs) in this dict, owned and bounded by the extension, and resubmitted from C with each call's arrays
# (native/python/array_collectives.c), which recycles an output once nobody holds it.
_PREPARED_REQUESTS = _tensor_calls.named_allreduces

# allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
#                 process_set=None), and allreduce with the same arguments, are C functions with Horovod's
# signature (process_set None is Horovod's default, global_process_set): they bind the arguments, resolve the op,
# and check and prepare what is new, without a Python frame per tensor.
allreduce_async = _tensor_calls.allreduce_async
allreduce = _tensor_calls.allreduce


# Prepared groups of named grouped all-reduces, by name: a training loop submits the same names, dtypes and
# shapes every step, so their C requests are filled once (bounded: cleared when full); C checks that each call's
# arrays still match them.
_PREPARED_GROUPS = {}
_PREPARED_GROUPS_LIMIT = 256


def remember(cache, key, value, limit):
    """Sets cache[key] = value, emptying the cache first when it is full (the keys of a training loop repeat, so it
    refills with what is in use); returns value."""
    if len(cache) >= limit and key not in cache:
        cache.clear()
    cache[key] = value
    return value


def _prepare_group(name, arrays, op, prescale_factor, postscale_factor, process_set):
    base = name or auto_name("grouped_allreduce", process_set)
    prepared = PreparedGroup([request_for(Collective.ALLREDUCE, f"{base}.{i}", dtype_name(a.dtype), a.shape, 0, 0,
                                          op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                          process_set=process_set)
                              for i, a in enumerate(arrays)])
    if name:
        remember(_PREPARED_GROUPS, name, prepared, _PREPARED_GROUPS_LIMIT)  # replaces other dtypes or shapes
    return prepared


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    _require_init()
    op = resolve_op(op, average)
    tensors = tensors if isinstance(tensors, (list, tuple)) else list(tensors)  # read twice below at most
    arguments = (op, prescale_factor, postscale_factor, process_set)
    prepared = _PREPARED_GROUPS.get(name) if name else None
    outputs = None if prepared is None else _tensor_calls.point_arrays(prepared, tensors, *arguments)
    if outputs is None:  # a new group, other shapes or dtypes, or arrays that are not contiguous NumPy arrays
        tensors = [_contiguous(t) for t in tensors]
        prepared = _prepare_group(name, tensors, *arguments)
        outputs = _tensor_calls.point_arrays(prepared, tensors, *arguments)
        if outputs is None:
            raise TypeError(f"grouped all-reduce '{name}': the arrays do not match the requests made of them")
    # One int handle for the group, as in Horovod: synchronize returns the list.
    return _track(prepared.submit(keepalive=(tensors, outputs)), outputs)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set))


def _request(collective, tensor, name, process_set, splits=None, **arguments):
    """The request of one array and the function that makes its result from the finished handle: the output
    allocated here as the collective's description sizes it, or read from the core's memory (gathered rows)."""
    _require_init()
    array = _contiguous(tensor)
    name = name or auto_name(describe(collective).name, process_set)
    shape = output_shape(collective, name, array.shape, process_set)
    output = None if shape is None else np.empty(shape, dtype=array.dtype)
    request = request_for(collective, name, dtype_name(array.dtype), array.shape, address(array),
                          0 if output is None else address(output), splits=splits, process_set=process_set,
                          keepalive=(array, output), **arguments)
    if output is not None:
        return request, lambda handle: output
    if splits is None:
        return request, lambda handle: _core_output(handle, array.dtype)
    return request, lambda handle: (_core_output(handle, array.dtype),
                                    np.asarray(handle.received_splits(), dtype=np.int32))


def _allgather_request(tensor, name, process_set):
    array = _contiguous(tensor)
    return _request(Collective.ALLGATHER, array.reshape(1) if array.ndim == 0 else array, name, process_set)


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _track(*_submitted(_allgather_request(tensor, name, process_set)))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension (which may differ by rank)."""
    return _run(*_allgather_request(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _track(*_submitted(_request(Collective.BROADCAST, tensor, name, process_set, root_rank=root_rank)))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's tensor on every rank (root_rank is a global rank, also for a process set)."""
    return _run(*_request(Collective.BROADCAST, tensor, name, process_set, root_rank=root_rank))


def _alltoall_splits(splits):
    return None if splits is None else np.asarray(splits).ravel()


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    return _track(*_submitted(_request(Collective.ALLTOALL, tensor, name, process_set, _alltoall_splits(splits))))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows to rank i; returns the received rows (and, with splits, how many came from each)."""
    return _run(*_request(Collective.ALLTOALL, tensor, name, process_set, _alltoall_splits(splits)))


def _reducescatter_request(tensor, name, op, process_set, prescale_factor, postscale_factor):
    return _request(Collective.REDUCESCATTER, tensor, name, process_set, op=resolve_op(op, None),
                    prescale_factor=prescale_factor, postscale_factor=postscale_factor)


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
    request = request_for(Collective.BARRIER, auto_name(describe(Collective.BARRIER).name, process_set), "uint8", (), 0,
                          process_set=process_set)
    _run(request, lambda handle: None)


def join(process_set=global_process_set):
    """Signals that this rank has no more data: until every rank has joined, it contributes zeros to the
    others' allreduces. Returns the rank that joined last."""
    _require_init()
    request = request_for(Collective.JOIN, "__hvdlite.join", "uint8", (), 0, process_set=process_set)
    return _run(request, lambda handle: handle.result())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles obj on root_rank and returns it on every rank."""
    name = name or auto_name("broadcast_object", process_set)
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if rank() == root_rank else None
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
