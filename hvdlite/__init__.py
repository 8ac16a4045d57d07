"""hvdlite: Horovod-style data-parallel training over MPI.

The framework-free core: lifecycle, process sets and numpy-level collectives. Framework adapters
live in hvdlite.torch, hvdlite.tensorflow and hvdlite.keras.
"""
from .basics import (cross_rank, cross_size, cuda_built, gloo_built, gloo_enabled, init, is_homogeneous,
                     is_initialized, local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                     nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from .errors import HorovodInternalError, HvdliteError
from .ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async, allgather_object, allreduce,
                  allreduce_async, alltoall, alltoall_async, barrier, broadcast, broadcast_async, broadcast_object,
                  grouped_allreduce, grouped_allreduce_async, join, poll, reducescatter, reducescatter_async,
                  synchronize)
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

__version__ = "0.1.0"
