"""hvdlite: Horovod-style data-parallel training over MPI.

The framework-free core: lifecycle, process sets and numpy-level collectives. Framework adapters
live in hvdlite.torch, hvdlite.tensorflow and hvdlite.keras.

Names load on first use: ``import hvdlite.runner`` or ``hvdlite.config`` (the launcher) must neither open
the native library nor start MPI in the launcher's own process. ``hvdlite.run(func, num_proc=N)`` is horovod.run.
"""
import importlib

from . import build_info as _build_info

__version__ = "0.1.0"
_build_info.redirect_native_imports()

_EXPORTS = {
    "basics": ["ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled",
               "is_homogeneous",
               "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
               "nccl_built", "rank", "rocm_built", "shutdown", "size", "start_timeline", "stop_timeline"],
    "errors": ["HorovodInternalError", "HvdliteError", "InvalidRequestError"],
    "gpu": ["gpu_status"],
    "ops": ["Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather", "allgather_async", "allgather_object",
            "allreduce", "allreduce_async", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_async",
            "broadcast_object", "grouped_allreduce", "grouped_allreduce_async", "join", "poll", "reducescatter",
            "reducescatter_async", "synchronize"],
    "process_sets": ["ProcessSet", "add_process_set", "global_process_set", "remove_process_set"],
    "runner": ["run"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_MODULE_OF, "init"])


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'hvdlite' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def init(comm=None, process_sets=None):
    """Starts hvdlite on this rank (basics.init), then binds every exported name here (_bind_all)."""
    from .basics import init as start
    start(comm, process_sets)
    _bind_all()


def _bind_all():
    """Binds every exported name and drops ``__getattr__``. CPython does not specialise attribute reads on a
    module that defines ``__getattr__``: each ``hvd.X`` of a training loop would take the generic lookup (about
    45 ns; three per tensor in ``hvd.synchronize(hvd.allreduce_async(x, name=n, op=hvd.Sum))``). ``init()``
    calls it, once loading the native library is due anyway."""
    for name in __all__:
        if name not in globals():
            __getattr__(name)
    globals().pop("__getattr__", None)


def __dir__():
    return sorted(set(globals()) | set(__all__))
