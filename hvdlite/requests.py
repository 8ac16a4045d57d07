"""The pointer-level entry of the core, for adapters: a Request in, a Handle out.

Adapters turn their tensors into (address, dtype, shape) and keep them alive through ``keepalive``;
nothing here copies tensor data. The extension (native/python/request_fill.c) is the one place a Request becomes
the core's C struct, and raises what is wrong with it, naming the tensor.
"""
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import ml_dtypes
import numpy as np

from . import _native, _tensor_calls  # _native first: it loads the core that _tensor_calls links against
from ._native import lib
from .process_sets import ProcessSet, global_process_set


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


# The dtype names the core carries -> enum hvdlite_dtype (built by the extension from the header).
DTYPES = _tensor_calls.DTYPES
_NUMPY_DTYPE_NAMES = {np.dtype(name): name for name in DTYPES if name != "bfloat16"}
_NUMPY_DTYPE_NAMES[np.dtype(ml_dtypes.bfloat16)] = "bfloat16"


def dtype_name(dtype):
    """The core's name for a NumPy dtype (a dict lookup: ``dtype.name`` costs microseconds per call).

    Types the core does not carry keep their NumPy name, and submitting them raises TypeError naming the tensor.
    """
    name = _NUMPY_DTYPE_NAMES.get(dtype)
    return name if name is not None else np.dtype(dtype).name


def address(array):
    """What Request.input_ptr/output_ptr take for a contiguous array: the array itself, whose buffer the extension
    reads (cheaper than ``array.ctypes.data``). Keep it alive through the request's keepalive."""
    return array


# auto_name(kind, process_set=None): a name for an unnamed tensor, equal on every rank that calls collectives in the
# same order; counted per process set, so that ranks outside a set do not advance its counter.
auto_name = _tensor_calls.auto_name


@dataclass(slots=True)
class Request:
    collective: int
    name: str
    dtype: str
    shape: Sequence[int]
    input_ptr: Any = 0    # an int address, or a contiguous buffer (address())
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

# submit(request): submits one request; returns its Handle at once.
submit = _tensor_calls.submit_request

# submit_and_wait(request): submits one request and waits for it (a synchronous collective); returns its finished
# Handle. Faster than submit() + wait() for a request nothing else is batched with: the background thread starts the
# round at once instead of holding the queue open for more submissions. Raises HvdliteError if the collective failed
# (the handle is released then).
submit_and_wait = _tensor_calls.submit_and_wait_request

# submit_group(requests): submits requests that run together (fused where their types allow) in one call; returns
# their Handles.
submit_group = _tensor_calls.submit_group

# wait_all(handles): waits for every handle (one C call, one wake-up for a fused group); then raises
# HvdliteError for the first that failed, if any. Release them all afterwards either way.
wait_all = _tensor_calls.wait_all
# release_all(handles): releases every handle not released yet.
release_all = _tensor_calls.release_all

# PreparedRequest(request): a request filled into its C form once, then submitted again and again with new buffers:
# what an optimizer does with a parameter's gradient every step. ``submit(input, output, keepalive)`` submits with
# these buffers (integer addresses, or contiguous arrays; same dtype and shape as prepared) kept alive by keepalive
# and returns the Handle at once; ``submit_and_wait`` (same arguments) also waits. The core knows it by a token
# (hvdlite_prepare) while it lives. A C type (native/python/prepared_request.c): no Python frame per gradient.
PreparedRequest = _tensor_calls.PreparedRequest

# PreparedGroup(requests): requests filled once, then submitted together again and again (with new buffers or the
# same). ``submit(inputs=None, outputs=None, keepalive=None)`` points the members at inputs and outputs if given and
# returns a GroupHandle: the members' handles as one C array, a Work (hvdlite/work.py) whose wait and release are one
# core call each. C types (native/python/prepared_group.c).
PreparedGroup = _tensor_calls.PreparedGroup
GroupHandle = _tensor_calls.GroupHandle

_ = _native  # the module keeps the library loaded for the lifetime of handles
