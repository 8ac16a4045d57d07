"""hvdlite.torch: Horovod's PyTorch API over the hvdlite core.

``import hvdlite.torch as hvd`` is the only change a Horovod PyTorch script needs. Tensors are handed to the
core as pointers, dtypes and shapes (no C++ is compiled against PyTorch): CPU tensors' host memory, and CUDA
tensors' device memory with the caller's stream, which the core's NCCL path orders itself after (gpu_path.py;
where no NCCL is found, they are staged through host memory). Importing this module never requires CUDA.
"""
from hvdlite.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown,
                            size, start_timeline, stop_timeline)
from hvdlite.errors import HorovodInternalError  # noqa: F401
from hvdlite.gpu import gpu_status  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                  remove_process_set)

from .compression import Compression  # noqa: F401
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: F401
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allgather_async,  # noqa: F401
                      allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async,
                      barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                      grouped_allgather_async, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                      grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async,
                      handle_average_backwards_compatibility, join, poll, reducescatter, reducescatter_async,
                      sparse_allreduce_async, synchronize)
from . import elastic  # noqa: F401
from .optimizer import DistributedOptimizer  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from . import distributed  # noqa: F401  (registers the "hvdlite" torch.distributed backend)
