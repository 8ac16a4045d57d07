"""The synchronous tensor collectives with Horovod's names and arguments.

The out-of-place ones are differentiable (autograd.py); the in-place ones (trailing underscore) are not.
Asynchronous variants live in async_ops.py and are re-exported here with ``poll`` and ``synchronize``.
"""
from hvdlite import ops as core_ops
from hvdlite.process_sets import global_process_set

from .async_ops import (Adasum, Average, Max, Min, Product, Sum, allgather_async, allreduce_async,  # noqa: F401
                        allreduce_async_, alltoall_async, broadcast_async, broadcast_async_,
                        grouped_allgather_async, grouped_allreduce_async, grouped_allreduce_async_,
                        grouped_reducescatter_async, handle_average_backwards_compatibility,
                        reducescatter_async, sparse_allreduce_async)
from .async_ops import check_op as _check_op
from .autograd import (HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast,
                       HorovodGroupedAllgather, HorovodGroupedAllreduce, HorovodGroupedReducescatter,
                       HorovodReducescatter)
from .compression import Compression
from .handles import poll, synchronize  # noqa: F401


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Returns ``tensor`` reduced over the process set (Average by default); the input is not modified.

    Differentiable. ``compression`` casts the tensor for the wire (e.g. ``Compression.fp16``); the result has
    the input's dtype.
    """
    op = _check_op(handle_average_backwards_compatibility(op, average))
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces ``tensor`` in place over the process set and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the list of ``tensors`` reduced together (fused where possible). Differentiable."""
    op = _check_op(handle_average_backwards_compatibility(op, average))
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                            *compressed)
    return [compression.decompress(r, c) for r, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """Reduces each tensor of the list in place, together, and returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns the concatenation along dimension 0 of ``tensor`` from every rank of the set (the first
    dimension may differ between ranks). Differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns the allgather of each tensor of the list, done together. Differentiable."""
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns ``tensor`` as it is on ``root_rank`` (a global rank, also for a process set, as in Horovod); the
    input is not modified.
    Differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites ``tensor`` with its value on ``root_rank`` and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` (in order) to rank i and concatenates what every rank sent here.

    ``splits`` is a list or tensor of ints (equal splits when None). Differentiable. As in Horovod, returns the
    output tensor alone when ``splits`` is None, else ``(output, received_splits)`` with ``received_splits``
    an int32 tensor of the rows received from each rank.
    """
    output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's block of dimension 0 of ``tensor`` reduced over the set (the first ``dim0 % size``
    ranks get one extra row). Differentiable."""
    _check_op(op)
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns the reducescatter of each tensor of the list, done together. Differentiable."""
    _check_op(op)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                *compressed)
    return [compression.decompress(r, c) for r, c in zip(reduced, ctxs)]


def join(device=-1):
    """Declares that this rank has no more data: until every rank has joined, it contributes zeros to the
    others' allreduces. Returns the rank that joined last. ``device`` is accepted for Horovod compatibility."""
    return core_ops.join()


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set has reached the barrier."""
    core_ops.barrier(process_set=process_set)
