"""What hvdlite finds of the GPU libraries it loads at run time: the CUDA driver (libcuda.so.1) and NCCL
(libnccl.so.2). hvdlite is built without CUDA, so importing it never needs either.

NCCL is looked for in this order: HVDLITE_NCCL_LIBRARY alone when set; a copy the process has loaded already
(PyTorch's CUDA wheels load theirs when torch initialises CUDA); the ``nvidia/nccl/lib`` folder of the
nvidia-nccl-cu12 / -cu13 wheels (``pip install hvdlite[cuda12]`` or ``[cuda13]``) on this Python's path; the
dynamic linker's default search.

Where the driver sees a GPU and NCCL is found, GPU tensors' collectives go through NCCL on the core's own stream
(native/src/collectives/nccl_executor.h), ordered after the work the framework enqueued on its stream before the
submission; ``nccl_built()`` is True. Reductions NCCL has no form for (int16, uint16, Adasum, averaged or scaled
integers) go through host memory, as everything does where NCCL is not found.
"""
import os
import sys

from . import config
from ._native import ffi, lib
from .errors import HorovodInternalError
from .requests import Output, ReduceOp, describe

NCCL_WHEEL_FOLDER = os.path.join("nvidia", "nccl", "lib")
# The core's dtype names that NCCL reduces (int16, uint16 and bool it does not).
NCCL_DTYPES = frozenset(["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"])
FLOATING_DTYPES = frozenset(["float16", "bfloat16", "float32", "float64"])


def nccl_wheel_folders(path=None):
    """The nvidia-nccl wheels' library folders on the Python path, in its order."""
    folders = []
    for entry in sys.path if path is None else path:
        folder = os.path.join(entry or os.getcwd(), NCCL_WHEEL_FOLDER)
        if os.path.isdir(folder) and folder not in folders:
            folders.append(folder)
    return folders


def gpu_status():
    """What was found, as a dict: cuda_driver (bool), gpus (how many the driver sees), cuda_reason, nccl (bool),
    nccl_version ("2.29.7"), nccl_path, nccl_reason, nccl_collectives (bool) and collectives_reason. A reason is
    empty where nothing is missing. The libraries are loaded by the first call (once per process)."""
    explicit = config.SETTINGS_BY_NAME["nccl_library"].read(os.environ)
    status = ffi.new("hvdlite_gpu_status *")
    lib.hvdlite_gpu_load(explicit.encode(), os.pathsep.join(nccl_wheel_folders()).encode(), status)
    reason = _collectives_reason(status)
    return {
        "cuda_driver": bool(status.driver_loaded),
        "gpus": status.device_count,
        "cuda_reason": ffi.string(status.driver_reason).decode(),
        "nccl": bool(status.nccl_loaded),
        "nccl_version": ffi.string(status.nccl_version_text).decode(),
        "nccl_path": ffi.string(status.nccl_path).decode(),
        "nccl_reason": ffi.string(status.nccl_reason).decode(),
        "nccl_collectives": not reason,
        "collectives_reason": reason,
    }


def _collectives_reason(status):
    if not status.driver_loaded:
        return "GPU tensors go through host memory: no CUDA driver"
    if status.device_count == 0:
        return "GPU tensors go through host memory: the CUDA driver sees no GPU"
    if not status.nccl_loaded:
        return "GPU tensors go through host memory: NCCL not found"
    return ""


_available = []  # [bool] once asked: the libraries load once per process


def collectives_available():
    """Whether GPU tensors go through NCCL in this process (loads the GPU libraries on the first call)."""
    if not _available:
        _available.append(gpu_status()["nccl_collectives"])
    return _available[0]


def serves(collective, dtype, op=0, prescale_factor=1.0, postscale_factor=1.0):
    """Whether the NCCL path runs this request of GPU tensors (collective: a Collective number or its name,
    "allreduce", "broadcast", ...; dtype the core's name; op an hvdlite op); else the adapter stages it through
    host memory."""
    if not collectives_available():
        return False
    info = describe(collective)
    if info.output == Output.NONE:
        return False
    if not info.takes_op:  # bytes moved, any dtype
        return True
    if dtype not in NCCL_DTYPES or op == ReduceOp.ADASUM:
        return False
    scaled = prescale_factor != 1.0 or postscale_factor != 1.0
    if op not in (ReduceOp.SUM, ReduceOp.AVERAGE):
        return not scaled
    return dtype in FLOATING_DTYPES or (op == ReduceOp.SUM and not scaled)


def _raise_if(code, buffer, what):
    if code != 0:
        raise HorovodInternalError(f"{what}: {ffi.string(buffer).decode()}")


def stream_wait(core_handles, stream):
    """Makes ``stream`` (a CUstream address) wait for the GPU work of finished core handles, without the host
    waiting."""
    buffer = ffi.new("char[]", 512)
    for handle in core_handles:
        _raise_if(lib.hvdlite_gpu_stream_wait(handle._id, ffi.cast("void *", stream), buffer, len(buffer)), buffer,
                  f"GPU collective '{handle.name}'")


def host_wait(core_handles):
    """Blocks until the GPU work of finished core handles has finished (frameworks that expose no stream)."""
    buffer = ffi.new("char[]", 512)
    for handle in core_handles:
        _raise_if(lib.hvdlite_gpu_host_wait(handle._id, buffer, len(buffer)), buffer,
                  f"GPU collective '{handle.name}'")

