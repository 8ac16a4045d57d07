"""What hvdlite finds of the GPU libraries it loads at run time: the CUDA driver (libcuda.so.1) and NCCL
(libnccl.so.2). hvdlite is built without CUDA, so importing it never needs either.

NCCL is looked for in this order: HVDLITE_NCCL_LIBRARY alone when set; a copy the process has loaded already
(PyTorch's CUDA wheels load theirs when torch initialises CUDA); the ``nvidia/nccl/lib`` folder of the
nvidia-nccl-cu12 / -cu13 wheels (``pip install hvdlite[cuda12]`` or ``[cuda13]``) on this Python's path; the
dynamic linker's default search. GPU tensors are reduced through host memory in this version: the NCCL data path
is not built yet, so ``nccl_built()`` is False even where NCCL is found.
"""
import os
import sys

from . import config
from ._native import ffi, lib

NCCL_WHEEL_FOLDER = os.path.join("nvidia", "nccl", "lib")
COLLECTIVES_REASON = ("GPU tensors are copied to host memory and reduced there: the NCCL data path is not in this "
                      "version of hvdlite")


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
    return {
        "cuda_driver": bool(status.driver_loaded),
        "gpus": status.device_count,
        "cuda_reason": ffi.string(status.driver_reason).decode(),
        "nccl": bool(status.nccl_loaded),
        "nccl_version": ffi.string(status.nccl_version_text).decode(),
        "nccl_path": ffi.string(status.nccl_path).decode(),
        "nccl_reason": ffi.string(status.nccl_reason).decode(),
        "nccl_collectives": False,
        "collectives_reason": COLLECTIVES_REASON,
    }

