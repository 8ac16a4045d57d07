"""Asynchronous tensor collectives: each call enqueues work on the core and returns an integer handle at once.

``synchronize(handle)`` (in handles.py) waits and returns the result. These functions are not differentiable;
mpi_ops.py builds the differentiable synchronous API on top of them.
"""

import numpy as np
import torch

from hvdlite import ops as core_ops
from hvdlite._tensor_calls import allreduce_in_place_async
from hvdlite.process_sets import global_process_set
from hvdlite.requests import Collective, Request, auto_name, submit, submit_group

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


# ---------------------------------------------------------------------------------------------- allreduce

def _allreduce_request(tensor, output, name, op, prescale_factor, postscale_factor, process_set, gpu=None):
    return Request(collective=Collective.ALLREDUCE, name=name, dtype=staging.core_dtype(tensor),
                   shape=tuple(tensor.shape), input_ptr=staging.address(tensor),
                   output_ptr=staging.address(output), op=op, prescale_factor=float(prescale_factor),
                   postscale_factor=float(postscale_factor), process_set=process_set,
                   keepalive=(tensor, output), gpu=gpu)


def _allreduce_on_gpu(tensors, names, op, prescale_factor, postscale_factor, process_set, in_place):
    """As _allreduce_group, in GPU memory through NCCL: in place where the tensor is contiguous."""
    inputs = [gpu_path.device_copy(t) for t in tensors]
    outputs = inputs if in_place else [torch.empty_like(i) for i in inputs]
    requests = [_allreduce_request(i, o, n, op, prescale_factor, postscale_factor, process_set,
                                   gpu=gpu_path.placement(i))
                for i, o, n in zip(inputs, outputs, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]

    def finish(core_handles):
        gpu_path.order_after(core_handles, tensors[0].device)
        return [staging.write_back(t, o) for t, o in zip(tensors, outputs)] if in_place else outputs
    return core, finish


def _allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set, in_place):
    """Submits one allreduce per tensor as a group; returns a handle whose result is the list of outputs."""
    check_op(op)
    if gpu_path.serves(tensors, "allreduce", op, prescale_factor, postscale_factor):
        return _allreduce_on_gpu(tensors, names, op, prescale_factor, postscale_factor, process_set, in_place)
    hosts = [staging.host_copy(t) for t in tensors]
    outs = hosts if in_place else [staging.host_empty(h.shape, h.dtype) for h in hosts]
    requests = [_allreduce_request(h, o, n, op, prescale_factor, postscale_factor, process_set)
                for h, o, n in zip(hosts, outs, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]

    def finish(_):
        if in_place:
            return [staging.write_back(t, h) for t, h in zip(tensors, hosts)]
        return [staging.to_device(o, t) for t, o in zip(tensors, outs)]
    return core, finish


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

def _allgather_on_gpu(tensors, names, process_set):
    """As _allgather_group, in GPU memory through NCCL: every rank's first dimensions are gathered on the host
    first, so that the outputs exist before the GPU all-gather writes them."""
    inputs = [gpu_path.device_copy(t) for t in tensors]
    rows = core_ops.allgather(np.array([i.shape[0] for i in inputs], np.int64), name=f"{names[0]}.rows",
                              process_set=process_set).reshape(process_set.size(), len(inputs)).sum(axis=0)
    outputs = [torch.empty((int(r),) + tuple(i.shape[1:]), dtype=i.dtype, device=i.device) for r, i in zip(rows, inputs)]
    requests = [Request(collective=Collective.ALLGATHER, name=n, dtype=staging.core_dtype(i), shape=tuple(i.shape),
                        input_ptr=staging.address(i), output_ptr=staging.address(o), process_set=process_set,
                        keepalive=(i, o), gpu=gpu_path.placement(i))
                for i, o, n in zip(inputs, outputs, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]

    def finish(core_handles):
        gpu_path.order_after(core_handles, tensors[0].device)
        return outputs
    return core, finish


def _allgather_group(tensors, names, process_set):
    if gpu_path.serves(tensors, "allgather"):
        return _allgather_on_gpu(tensors, names, process_set)
    hosts = [staging.host_copy(t) for t in tensors]
    requests = [Request(collective=Collective.ALLGATHER, name=n, dtype=staging.core_dtype(h),
                        shape=tuple(h.shape), input_ptr=staging.address(h), output_ptr=0,
                        process_set=process_set, keepalive=(h,))
                for h, n in zip(hosts, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]

    def finish(core_handles):
        return [staging.to_device(staging.tensor_from_core(c, t.dtype), t)
                for c, t in zip(core_handles, tensors)]
    return core, finish


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
    on_gpu = gpu_path.serves([tensor], "broadcast")
    host = gpu_path.device_copy(tensor) if on_gpu else staging.host_copy(tensor)
    out = host if in_place else torch.empty_like(host) if on_gpu else staging.host_empty(host.shape, host.dtype)
    request = Request(collective=Collective.BROADCAST, name=_single(name, "broadcast", process_set),
                      dtype=staging.core_dtype(host), shape=tuple(host.shape),
                      input_ptr=staging.address(host), output_ptr=staging.address(out),
                      root_rank=process_set.root_in_set(root_rank), process_set=process_set, keepalive=(host, out),
                      gpu=gpu_path.placement(host) if on_gpu else None)
    core = [submit(request)]
    if on_gpu:
        def finish(core_handles):
            gpu_path.order_after(core_handles, tensor.device)
            return staging.write_back(tensor, host) if in_place else out
        return handles.register(core, finish)
    if in_place:
        return handles.register(core, lambda _: staging.write_back(tensor, host))
    return handles.register(core, lambda _: staging.to_device(out, tensor))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending ``tensor`` from ``root_rank`` to every rank; the input is not modified."""
    return _broadcast(tensor, root_rank, name, process_set, in_place=False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting ``tensor`` on every rank with its value on ``root_rank``."""
    return _broadcast(tensor, root_rank, name, process_set, in_place=True)


# ----------------------------------------------------------------------------------------------- alltoall

def _alltoall_on_gpu(tensor, split_list, name, process_set):
    """alltoall in GPU memory through NCCL: how many rows each rank receives is exchanged on the host first, so
    that the output exists before the GPU exchange writes it."""
    size = process_set.size()
    if split_list is None:
        split_list = [tensor.shape[0] // size] * size
    received = core_ops.alltoall(np.array(split_list, np.int32), name=f"{name}.splits", process_set=process_set)
    received = received[0] if isinstance(received, tuple) else received
    source = gpu_path.device_copy(tensor)
    output = torch.empty((int(received.sum()),) + tuple(source.shape[1:]), dtype=source.dtype, device=source.device)
    request = Request(collective=Collective.ALLTOALL, name=name, dtype=staging.core_dtype(source),
                      shape=tuple(source.shape), input_ptr=staging.address(source), output_ptr=staging.address(output),
                      splits=split_list, process_set=process_set, keepalive=(source, output),
                      gpu=gpu_path.placement(source))

    def finish(core_handles):
        gpu_path.order_after(core_handles, tensor.device)
        return output, torch.tensor(core_handles[0].received_splits(), dtype=torch.int32)
    return handles.register([submit(request)], finish)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts scattering slices of ``tensor`` (``splits[i]`` rows to rank i; equal when None) and gathering
    what the others send. The result is ``(output, received_splits)``."""
    split_list = staging.int_list(splits, "splits")
    if gpu_path.serves([tensor], "alltoall"):
        return _alltoall_on_gpu(tensor, split_list, _single(name, "alltoall", process_set), process_set)
    host = staging.host_copy(tensor)
    request = Request(collective=Collective.ALLTOALL, name=_single(name, "alltoall", process_set),
                      dtype=staging.core_dtype(host), shape=tuple(host.shape),
                      input_ptr=staging.address(host), output_ptr=0, splits=split_list,
                      process_set=process_set, keepalive=(host,))
    core = [submit(request)]

    def finish(core_handles):
        output = staging.to_device(staging.tensor_from_core(core_handles[0], tensor.dtype), tensor)
        received = torch.tensor(core_handles[0].received_splits(), dtype=torch.int32)
        return output, received
    return handles.register(core, finish)


# ------------------------------------------------------------------------------------------ reducescatter

def _reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    check_op(op)
    on_gpu = gpu_path.serves(tensors, "reducescatter", op, prescale_factor, postscale_factor)
    hosts = [gpu_path.device_copy(t) if on_gpu else staging.host_copy(t) for t in tensors]
    size, rank = process_set.size(), process_set.rank()
    outs = []
    for h in hosts:
        if h.dim() == 0:
            raise ValueError("reducescatter needs a tensor with at least one dimension")
        rows = core_ops.reducescatter_rows(h.shape[0], size, rank)
        outs.append(torch.empty((rows,) + tuple(h.shape[1:]), dtype=h.dtype, device=h.device))
    requests = [Request(collective=Collective.REDUCESCATTER, name=n, dtype=staging.core_dtype(h),
                        shape=tuple(h.shape), input_ptr=staging.address(h), output_ptr=staging.address(o),
                        op=op, prescale_factor=float(prescale_factor), postscale_factor=float(postscale_factor),
                        process_set=process_set, keepalive=(h, o), gpu=gpu_path.placement(h) if on_gpu else None)
                for h, o, n in zip(hosts, outs, names)]
    core = submit_group(requests) if len(requests) != 1 else [submit(requests[0])]

    def finish(core_handles):
        if on_gpu:
            gpu_path.order_after(core_handles, tensors[0].device)
            return outs
        return [staging.to_device(o, t) for o, t in zip(outs, tensors)]
    return core, finish


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
