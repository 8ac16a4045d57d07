"""NumPy arrays in, NumPy arrays out, through the core's pointer-level requests (``hvdlite.requests``).

These are the bodies of every TensorFlow collective: called directly on the eager tensor's host buffer, or run
by ``tf.numpy_function`` inside a graph (tensor_bridge.py). Each call submits all its requests as one group,
waits on every handle with the GIL released, and frees the core's memory before returning.
What costs: inputs are read in place (no copy); outputs are fresh 64-byte-aligned arrays (the core writes
into them directly, except allgather/alltoall whose result is copied once out of the core's memory).
"""
import numpy as np

from hvdlite import ops as core_ops
from hvdlite.errors import HvdliteError
from hvdlite.requests import Collective, Request, dtype_name, release_all, submit_and_wait, submit_group, wait_all

def aligned_empty(shape, dtype, alignment=64):
    """An uninitialised array whose data starts on a 64-byte boundary, as TensorFlow's kernels expect of
    buffers they adopt without copying (tensor_bridge.py hands eager outputs to TensorFlow through DLPack)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.__array_interface__["data"][0]) % alignment
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _address(array):
    return array.__array_interface__["data"][0]


def _contiguous(array):
    array = np.asarray(array)
    # np.ascontiguousarray would turn a 0-d array into a 1-d one: copy only when needed, keeping the shape.
    return array if array.flags.c_contiguous else np.ascontiguousarray(array).reshape(array.shape)


def _run(requests):
    """Submits the requests as one group and waits for all of them; raises the first failure after every
    handle is done and released, so that no handle outlives the call."""
    if len(requests) == 1:  # one call submits and waits: no coalescing window
        try:
            return [submit_and_wait(requests[0])], None
        except HvdliteError as error:
            return [], error
    handles = submit_group(requests)
    try:
        wait_all(handles)
    except HvdliteError as error:
        return handles, error
    return handles, None


def _with_outputs(requests, collect):
    handles, failure = _run(requests)
    try:
        if failure is not None:
            raise failure
        return collect(handles)
    finally:
        release_all(handles)


def _core_output(handle, dtype):
    """Copies a core-allocated output (allgather, alltoall) into an array TensorFlow may keep."""
    shape = tuple(handle.output_shape())
    count = int(np.prod(shape, dtype=np.int64))
    out = aligned_empty(shape, dtype)
    if count:
        out.reshape(-1)[...] = np.frombuffer(handle.output_buffer(), dtype=dtype, count=count)
    return out


def allreduce(arrays, names, op, prescale_factor, postscale_factor, process_set):
    inputs = [_contiguous(a) for a in arrays]
    outputs = [aligned_empty(a.shape, a.dtype) for a in inputs]
    requests = [Request(collective=Collective.ALLREDUCE, name=name, dtype=dtype_name(a.dtype), shape=a.shape,
                        input_ptr=_address(a), output_ptr=_address(out), op=op,
                        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                        process_set=process_set, keepalive=(a, out))
                for a, out, name in zip(inputs, outputs, names)]
    return _with_outputs(requests, lambda handles: outputs)


def allgather(arrays, names, process_set):
    inputs = [_contiguous(a) for a in arrays]
    for a, name in zip(inputs, names):
        if a.ndim == 0:
            raise ValueError(f"allgather of '{name}': a scalar has no first dimension to gather along; "
                             "reshape it to [1] first")
    requests = [Request(collective=Collective.ALLGATHER, name=name, dtype=dtype_name(a.dtype), shape=a.shape,
                        input_ptr=_address(a), output_ptr=0, process_set=process_set, keepalive=(a,))
                for a, name in zip(inputs, names)]
    return _with_outputs(requests, lambda handles: [_core_output(h, a.dtype) for h, a in zip(handles, inputs)])


def broadcast(arrays, names, root_rank, process_set):
    inputs = [_contiguous(a) for a in arrays]
    outputs = [aligned_empty(a.shape, a.dtype) for a in inputs]
    requests = [Request(collective=Collective.BROADCAST, name=name, dtype=dtype_name(a.dtype), shape=a.shape,
                        input_ptr=_address(a), output_ptr=_address(out),
                        root_rank=process_set.root_in_set(root_rank),
                        process_set=process_set, keepalive=(a, out))
                for a, out, name in zip(inputs, outputs, names)]
    return _with_outputs(requests, lambda handles: outputs)


def alltoall(array, splits, name, process_set):
    """Returns (output, received_splits as int32)."""
    a = _contiguous(array)
    if a.ndim == 0:
        raise ValueError(f"alltoall of '{name}': a scalar has no first dimension to split")
    split_list = None if splits is None or np.size(splits) == 0 else [int(s) for s in np.ravel(splits)]
    request = Request(collective=Collective.ALLTOALL, name=name, dtype=dtype_name(a.dtype), shape=a.shape,
                      input_ptr=_address(a), output_ptr=0, splits=split_list, process_set=process_set,
                      keepalive=(a,))

    def collect(handles):
        handle = handles[0]
        return _core_output(handle, a.dtype), np.asarray(handle.received_splits(), dtype=np.int32)
    return _with_outputs([request], collect)


def reducescatter(arrays, names, op, prescale_factor, postscale_factor, process_set):
    inputs = [_contiguous(a) for a in arrays]
    size, rank = process_set.size(), process_set.rank()
    outputs = []
    for a, name in zip(inputs, names):
        if a.ndim == 0:
            raise ValueError(f"reducescatter of '{name}': a scalar has no first dimension to scatter")
        rows = core_ops.reducescatter_rows(a.shape[0], size, rank)
        outputs.append(aligned_empty((rows,) + a.shape[1:], a.dtype))
    requests = [Request(collective=Collective.REDUCESCATTER, name=name, dtype=dtype_name(a.dtype),
                        shape=a.shape, input_ptr=_address(a), output_ptr=_address(out), op=op,
                        prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                        process_set=process_set, keepalive=(a, out))
                for a, out, name in zip(inputs, outputs, names)]
    return _with_outputs(requests, lambda handles: outputs)
