"""NumPy arrays in, NumPy arrays out, through the core's pointer-level requests (``hvdlite.requests``).

These are the bodies of every TensorFlow collective: called directly on the eager tensor's host buffer, or run
by ``tf.numpy_function`` inside a graph (tensor_bridge.py). Each call submits all its requests as one group,
waits on every handle with the GIL released, and frees the core's memory before returning.
What costs: inputs are read in place (no copy); outputs are fresh 64-byte-aligned arrays (the core writes
into them directly, except allgather/alltoall whose result is copied once out of the core's memory).
"""
import numpy as np

from hvdlite.errors import HvdliteError
from hvdlite.requests import (Collective, dtype_name, output_shape, release_all, request_for,
                              submit_and_wait, submit_group, wait_all)

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


def _requests(collective, arrays, names, process_set, splits=None, **arguments):
    """One request per array, as the collective's description says (hvdlite.requests.request_for); its output
    allocated here where the description sizes it, else None (the core's, copied by _core_output)."""
    inputs = [_contiguous(a) for a in arrays]
    shapes = [output_shape(collective, name, a.shape, process_set) for a, name in zip(inputs, names)]
    outputs = [None if shape is None else aligned_empty(shape, a.dtype) for a, shape in zip(inputs, shapes)]
    requests = [request_for(collective, name, dtype_name(a.dtype), a.shape, _address(a),
                            0 if out is None else _address(out), splits=splits, process_set=process_set,
                            keepalive=(a, out), **arguments)
                for a, out, name in zip(inputs, outputs, names)]
    return inputs, outputs, requests


def _collective(collective, arrays, names, process_set, **arguments):
    """The arrays' requests run as one group; returns their outputs."""
    inputs, outputs, requests = _requests(collective, arrays, names, process_set, **arguments)

    def collect(handles):
        return [_core_output(h, a.dtype) if out is None else out for h, a, out in zip(handles, inputs, outputs)]
    return _with_outputs(requests, collect)


def allreduce(arrays, names, op, prescale_factor, postscale_factor, process_set):
    return _collective(Collective.ALLREDUCE, arrays, names, process_set, op=op, prescale_factor=prescale_factor,
                       postscale_factor=postscale_factor)


def allgather(arrays, names, process_set):
    return _collective(Collective.ALLGATHER, arrays, names, process_set)


def broadcast(arrays, names, root_rank, process_set):
    return _collective(Collective.BROADCAST, arrays, names, process_set, root_rank=root_rank)


def alltoall(array, splits, name, process_set):
    """Returns (output, received_splits as int32)."""
    split_list = None if splits is None or np.size(splits) == 0 else np.ravel(splits)
    inputs, _, requests = _requests(Collective.ALLTOALL, [array], [name], process_set, splits=split_list)

    def collect(handles):
        return _core_output(handles[0], inputs[0].dtype), np.asarray(handles[0].received_splits(), dtype=np.int32)
    return _with_outputs(requests, collect)


def reducescatter(arrays, names, op, prescale_factor, postscale_factor, process_set):
    return _collective(Collective.REDUCESCATTER, arrays, names, process_set, op=op, prescale_factor=prescale_factor,
                       postscale_factor=postscale_factor)
