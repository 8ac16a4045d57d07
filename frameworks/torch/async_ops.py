"""Asynchronous tensor collectives: each call enqueues work on the core and returns an integer handle at once.

``synchronize(handle)`` (in handles.py) waits and returns the result. These functions are not differentiable;
mpi_ops.py builds the differentiable synchronous API on top of them.
"""

import numpy as np
import torch

from hvdlite import ops as core_ops
from hvdlite._tensor_calls import allreduce_in_place_async
from hvdlite.process_sets import global_process_set
from hvdlite.requests import Collective, auto_name, output_shape, request_for, submit, submit_group

from . import gpu_path, handles, staging

Average, Sum, Adasum, Min, Max, Product = (core_ops.Average, core_ops.Sum, core_ops.Adasum, core_ops.Min,
                                           core_ops.Max, core_ops.Product)


# Horovod's op/average rule and op check live in the core, shared by every adapter.
handle_average_backwards_compatibility = core_ops.handle_average_backwards_compatibility
check_op = core_ops.check_op


set_auto_name = auto_name  # the core counts generated names per process set


def _names(name, kind, count, process_set):
    base = name if name is not None else set_auto_name(kind, process_set)
    return [f"{base}_{i}" for i in range(count)]


def _single(name, kind, process_set):
    return name if name is not None else set_auto_name(kind, process_set)


# ------------------------------------------------------------------------------------- one group of requests

def _submitted(collective, tensors, names, process_set, on_gpu, in_place=False, outputs=None, splits=None,
               **arguments):
    """Submits one request per tensor as the collective's description says (hvdlite.requests.request_for); returns
    (inputs, outputs, core handles). Inputs are the tensors where the core can use their memory, else contiguous
    copies (on the GPU for the NCCL path, else on the host); outputs are the inputs in place, the given ones, new
    tensors sized by the description, or None where the core allocates them (rows gathered on the host)."""
    inputs = [gpu_path.device_copy(t) if on_gpu else staging.host_copy(t) for t in tensors]
    if in_place:
        outputs = inputs
    elif outputs is None:
        shapes = [output_shape(collective, n, tuple(i.shape), process_set) for i, n in zip(inputs, names)]
        outputs = [None if shape is None else torch.empty(shape, dtype=i.dtype, device=i.device)
                   for i, shape in zip(inputs, shapes)]
    requests = [request_for(collective, n, staging.core_dtype(i), tuple(i.shape), staging.address(i),
                            0 if o is None else staging.address(o), splits=splits, process_set=process_set,
                            keepalive=(i, o), gpu=gpu_path.placement(i) if on_gpu else None, **arguments)
                for i, o, n in zip(inputs, outputs, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]
    return inputs, outputs, core


def _results(tensors, inputs, outputs, core_handles, on_gpu, in_place=False):
    """The results of finished core handles where the caller's tensors live: written into them in place, else the
    outputs (on the GPU, ordered after the collective on the current stream; on the host, moved to the tensors'
    device, those the core allocated copied out of its memory first)."""
    if on_gpu:
        gpu_path.order_after(core_handles, tensors[0].device)
    if in_place:
        return [staging.write_back(t, i) for t, i in zip(tensors, inputs)]
    if on_gpu:
        return outputs
    return [staging.to_device(staging.tensor_from_core(c, t.dtype) if o is None else o, t)
            for t, o, c in zip(tensors, outputs, core_handles)]


def _group(collective, tensors, names, process_set, on_gpu, in_place=False, **arguments):
    """_submitted's core handles, and the function that makes their results."""
    inputs, outputs, core = _submitted(collective, tensors, names, process_set, on_gpu, in_place, **arguments)
    return core, lambda core_handles: _results(tensors, inputs, outputs, core_handles, on_gpu, in_place)


# ---------------------------------------------------------------------------------------------- allreduce

def _allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set, in_place):
    """Submits one allreduce per tensor as a group; returns the core handles and the function of their results."""
    check_op(op)
    on_gpu = gpu_path.serves(tensors, Collective.ALLREDUCE, op, prescale_factor, postscale_factor)
    return _group(Collective.ALLREDUCE, tensors, names, process_set, on_gpu, in_place, op=op,
                  prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts reducing ``tensor`` over the process set; the input is not modified. Returns a handle."""
    array = staging.host_array(tensor)
    if array is not None:
        # The NumPy API's all-reduce (C): the name's request kept, its output recycled; synchronize makes the
        # result array a tensor.
        return core_ops.allreduce_async(array, average, name, op, prescale_factor, postscale_factor, process_set)
    op = handle_average_backwards_compatibility(op, average)
    core, finish = _allreduce_group([tensor], [_single(name, "allreduce", process_set)], op, prescale_factor,
                                    postscale_factor, process_set, in_place=False)
    return handles.register(core, lambda hs: finish(hs)[0])


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts reducing ``tensor`` in place over the process set. Returns a handle."""
    array = staging.host_array(tensor)
    if array is not None:  # as above, reduced into the tensor's own memory; synchronize returns the tensor
        return allreduce_in_place_async(tensor, array, average, name, op, prescale_factor, postscale_factor,
                                        process_set)
    op = handle_average_backwards_compatibility(op, average)
    core, finish = _allreduce_group([tensor], [_single(name, "allreduce", process_set)], op, prescale_factor,
                                    postscale_factor, process_set, in_place=True)
    return handles.register(core, lambda hs: finish(hs)[0])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors together (fused where possible). Returns one handle."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    core, finish = _allreduce_group(tensors, _names(name, "grouped_allreduce", len(tensors), process_set), op,
                                    prescale_factor, postscale_factor, process_set, in_place=False)
    return handles.register(core, finish)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors in place, together. Returns one handle."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    core, finish = _allreduce_group(tensors, _names(name, "grouped_allreduce", len(tensors), process_set), op,
                                    prescale_factor, postscale_factor, process_set, in_place=True)
    return handles.register(core, finish)


# ---------------------------------------------------------------------------------------------- allgather

def _gpu_allgather_outputs(tensors, names, process_set):
    """The outputs of a GPU all-gather: every rank's first dimensions are gathered on the host first, so that the
    outputs exist before the GPU all-gather writes them."""
    rows = core_ops.allgather(np.array([t.shape[0] for t in tensors], np.int64), name=f"{names[0]}.rows",
                              process_set=process_set).reshape(process_set.size(), len(tensors)).sum(axis=0)
    return [torch.empty((int(r),) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device) for r, t in zip(rows, tensors)]


def _allgather_group(tensors, names, process_set):
    on_gpu = gpu_path.serves(tensors, Collective.ALLGATHER)
    outputs = _gpu_allgather_outputs(tensors, names, process_set) if on_gpu else None
    inputs, outputs, core = _submitted(Collective.ALLGATHER, tensors, names, process_set, on_gpu, outputs=outputs)
    return core, lambda core_handles: _results(tensors, inputs, outputs, core_handles, on_gpu)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating ``tensor`` from every rank along dimension 0. Returns a handle."""
    core, finish = _allgather_group([tensor], [_single(name, "allgather", process_set)], process_set)
    return handles.register(core, lambda hs: finish(hs)[0])


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts gathering a list of tensors together. Returns one handle."""
    tensors = list(tensors)
    core, finish = _allgather_group(tensors, _names(name, "grouped_allgather", len(tensors), process_set), process_set)
    return handles.register(core, finish)


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Starts summing (``Sum``) or averaging (``Average``) a sparse COO tensor over the set by gathering every
    rank's indices and values, as Horovod does. Returns, as Horovod does, a callable: calling it waits and
    returns the reduced sparse tensor (coalesced). The callable is a Work (hvdlite/work.py) too."""
    if op not in (Average, Sum):
        raise ValueError(f"sparse_allreduce_async supports op=Average or op=Sum, got {op!r}")
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse COO tensor; use allreduce_async for dense ones")
    name = _single(name, "sparse_allreduce", process_set)
    coalesced = tensor.coalesce()
    indices = coalesced.indices().t().contiguous()
    values = coalesced.values().contiguous()
    core, gathered = _allgather_group([indices, values], _names(name, "grouped_allgather", 2, process_set),
                                      process_set)
    size = process_set.size()

    def build(core_handles):
        all_indices, all_values = gathered(core_handles)
        if op == Average:
            all_values = all_values / size
        return torch.sparse_coo_tensor(all_indices.t(), all_values, tensor.shape,
                                       check_invariants=False).coalesce()
    return handles.CallableWork(core, build)


# ---------------------------------------------------------------------------------------------- broadcast

def _broadcast(tensor, root_rank, name, process_set, in_place):
    on_gpu = gpu_path.serves([tensor], Collective.BROADCAST)
    core, finish = _group(Collective.BROADCAST, [tensor], [_single(name, "broadcast", process_set)], process_set,
                          on_gpu, in_place, root_rank=root_rank)
    return handles.register(core, lambda hs: finish(hs)[0])


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending ``tensor`` from ``root_rank`` to every rank; the input is not modified."""
    return _broadcast(tensor, root_rank, name, process_set, in_place=False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting ``tensor`` on every rank with its value on ``root_rank``."""
    return _broadcast(tensor, root_rank, name, process_set, in_place=True)


# ----------------------------------------------------------------------------------------------- alltoall

def _gpu_alltoall_output(tensor, split_list, name, process_set):
    """The output of a GPU alltoall: how many rows each rank receives is exchanged on the host first, so that the
    output exists before the GPU exchange writes it."""
    received = core_ops.alltoall(np.array(split_list, np.int32), name=f"{name}.splits", process_set=process_set)
    return torch.empty((int(received.sum()),) + tuple(tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts scattering slices of ``tensor`` (``splits[i]`` rows to rank i; equal when None) and gathering
    what the others send. The result is ``(output, received_splits)``."""
    split_list = staging.int_list(splits, "splits")
    name = _single(name, "alltoall", process_set)
    on_gpu = gpu_path.serves([tensor], Collective.ALLTOALL)
    outputs = None
    if on_gpu:
        size = process_set.size()
        split_list = split_list if split_list is not None else [tensor.shape[0] // size] * size
        outputs = [_gpu_alltoall_output(tensor, split_list, name, process_set)]
    inputs, outputs, core = _submitted(Collective.ALLTOALL, [tensor], [name], process_set, on_gpu, outputs=outputs,
                                       splits=split_list)

    def finish(core_handles):
        output = _results([tensor], inputs, outputs, core_handles, on_gpu)[0]
        return output, torch.tensor(core_handles[0].received_splits(), dtype=torch.int32)
    return handles.register(core, finish)


# ------------------------------------------------------------------------------------------ reducescatter

def _reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    check_op(op)
    on_gpu = gpu_path.serves(tensors, Collective.REDUCESCATTER, op, prescale_factor, postscale_factor)
    return _group(Collective.REDUCESCATTER, tensors, names, process_set, on_gpu, op=op,
                  prescale_factor=prescale_factor, postscale_factor=postscale_factor)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set and scattering the result's rows: rank r keeps its block of
    dimension 0 (the first ``dim0 % size`` ranks get one extra row). Returns a handle."""
    core, finish = _reducescatter_group([tensor], [_single(name, "reducescatter", process_set)], op, prescale_factor,
                                        postscale_factor, process_set)
    return handles.register(core, lambda hs: finish(hs)[0])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reduce-scattering a list of tensors together. Returns one handle."""
    tensors = list(tensors)
    core, finish = _reducescatter_group(tensors, _names(name, "grouped_reducescatter", len(tensors), process_set), op,
                                        prescale_factor, postscale_factor, process_set)
    return handles.register(core, finish)
