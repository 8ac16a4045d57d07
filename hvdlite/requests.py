"""The pointer-level entry of the core, for adapters: a Request in, a Handle out.

Adapters turn their tensors into (address, dtype, shape) and keep them alive through ``keepalive``;
nothing here copies tensor data. The extension (native/python/request_fill.c) is the one place a Request becomes
the core's C struct, and raises what is wrong with it, naming the tensor.
"""
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import ml_dtypes
import numpy as np

# _native first: it loads the core that _tensor_calls links against.
from . import _native, _tensor_calls, native_header
from ._native import lib
from .errors import InvalidRequestError
from .process_sets import ProcessSet, global_process_set


class Collective:
    """The core's collectives (enum hvdlite_collective): Collective.ALLREDUCE, ... as the header numbers them,
    one attribute per constant, so a collective added to the header is here too."""


for _constant, _value in native_header.enums()["hvdlite_collective"].items():
    setattr(Collective, _constant.removeprefix("HVDLITE_"), _value)


class ReduceOp:
    """The core's reduce ops (enum hvdlite_reduce_op); Horovod's hvd.Average, hvd.Sum, ... are these numbers."""
    AVERAGE = lib.HVDLITE_OP_AVERAGE
    SUM = lib.HVDLITE_OP_SUM
    ADASUM = lib.HVDLITE_OP_ADASUM
    MIN = lib.HVDLITE_OP_MIN
    MAX = lib.HVDLITE_OP_MAX
    PRODUCT = lib.HVDLITE_OP_PRODUCT


class Output:
    """How a collective's output is sized (enum hvdlite_output_rule)."""
    LIKE_INPUT = lib.HVDLITE_OUTPUT_LIKE_INPUT  # the caller's buffer, shaped as the input
    RANK_BLOCK = lib.HVDLITE_OUTPUT_RANK_BLOCK  # the caller's buffer, this rank's block of the input's rows
    GATHERED = lib.HVDLITE_OUTPUT_GATHERED      # rows from other ranks, allocated by the core (CPU tensors)
    NONE = lib.HVDLITE_OUTPUT_NONE              # no tensor


@dataclass(frozen=True, slots=True)
class CollectiveInfo:
    """The core's description of one collective (hvdlite_collective_info): what its request holds and how its
    output is sized. Every adapter builds its requests from it (request_for, output_shape)."""
    collective: int
    name: str
    output: int
    takes_op: bool
    takes_root: bool
    takes_splits: bool
    min_ndim: int


def _read_description(collective):
    info = lib.hvdlite_collective_describe(collective)
    return CollectiveInfo(collective, _native.ffi.string(info.name).decode(), info.output, bool(info.takes_op),
                          bool(info.takes_root), bool(info.takes_splits), info.min_ndim)


# Every collective of the header's enum, by number.
COLLECTIVES = {value: _read_description(value)
               for value in native_header.enums()["hvdlite_collective"].values()}


_BY_NAME = {info.name: info for info in COLLECTIVES.values()}


def describe(collective):
    """The CollectiveInfo of a Collective number or of its name ("allreduce", ...)."""
    return _BY_NAME[collective] if isinstance(collective, str) else COLLECTIVES[collective]


def output_first_dim(collective, first_dim, set_size, set_rank):
    """The output's first dimension on rank set_rank of a set of set_size ranks for an input of first_dim rows
    (reducescatter: the first first_dim % set_size ranks get one row more); -1 where the other ranks decide it."""
    return lib.hvdlite_output_first_dim(collective, first_dim, set_size, set_rank)


def output_shape(collective, name, shape, process_set):
    """The shape of the output a caller allocates for tensor ``name`` of ``shape`` on this rank of ``process_set``,
    or None where the other ranks decide it (gathered rows) or there is no output. check_dims first."""
    check_dims(collective, name, shape)
    info = COLLECTIVES[collective]
    if info.output == Output.LIKE_INPUT:
        return tuple(shape)
    if info.output == Output.RANK_BLOCK:
        rows = output_first_dim(collective, shape[0], process_set.size(), process_set.rank())
        return (rows,) + tuple(shape[1:])
    return None


def check_dims(collective, name, shape):
    """InvalidRequestError (a ValueError) naming the tensor when it has fewer dimensions than the collective needs
    to gather, split or scatter rows."""
    info = COLLECTIVES[collective]
    if len(shape) < info.min_ndim:
        raise InvalidRequestError(f"{info.name} of tensor '{name}' takes tensors of at least {info.min_ndim} "
                                  f"dimension, got shape {tuple(shape)} (reshape a scalar to [1])")


def request_for(collective, name, dtype, shape, input_ptr, output_ptr=0, *, op=0, prescale_factor=1.0,
                postscale_factor=1.0, root_rank=0, splits=None, process_set=None, keepalive=(), gpu=None):
    """The Request of one tensor of ``collective``, holding what its description says it takes: ``root_rank`` is a
    global rank (the request carries the set's), ``splits`` any sequence of integers or None. The dimensions are
    checked here, naming the tensor; the rest is checked where the request is filled (request_fill.c)."""
    info = COLLECTIVES[collective]
    check_dims(collective, name, shape)
    process_set = global_process_set if process_set is None else process_set
    request = Request(collective, name, dtype, shape, input_ptr, output_ptr, process_set=process_set,
                      keepalive=keepalive, gpu=gpu)
    if info.takes_op:
        request.op = op
        request.prescale_factor = float(prescale_factor)
        request.postscale_factor = float(postscale_factor)
    if info.takes_root:
        request.root_rank = process_set.root_in_set(root_rank)
    if info.takes_splits and splits is not None:
        request.splits = [int(s) for s in splits]
    return request


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
