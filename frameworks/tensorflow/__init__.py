"""hvdlite for TensorFlow 2: ``import hvdlite.tensorflow as hvd``.

Horovod's TensorFlow API on hvdlite's core: the queries and process sets of the core, collectives on
tensors that work eagerly and inside ``tf.function`` with gradients, ``DistributedGradientTape``,
``broadcast_variables``, and (for Keras optimizers) ``DistributedOptimizer``. No C++ is compiled against
TensorFlow: collectives run as ``tf.numpy_function`` ops over the core's C ABI (see docs/tensorflow.md).
"""
from hvdlite.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown,
                            size, start_timeline, stop_timeline)
from hvdlite.errors import HorovodInternalError, HvdliteError  # noqa: F401
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                  remove_process_set)

from . import elastic  # noqa: F401
from .compression import Compression  # noqa: F401
from .functions import (allgather_object, broadcast_, broadcast_global_variables, broadcast_object,  # noqa: F401
                        broadcast_object_fn, broadcast_variables)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from .mpi_ops import (allgather, allreduce, alltoall, barrier, broadcast, grouped_allgather,  # noqa: F401
                      grouped_allreduce, grouped_broadcast, grouped_reducescatter,
                      handle_average_backwards_compatibility, join, reducescatter)
from .queries import (is_initialized_op, local_rank_op, local_size_op, process_set_included_op,  # noqa: F401
                      rank_op, size_op)
from .sync_batch_norm import SyncBatchNormalization  # noqa: F401


def DistributedOptimizer(optimizer, *args, **kwargs):
    """For a Keras optimizer, the same as ``hvdlite.tensorflow.keras.DistributedOptimizer``."""
    from .keras.optimizer import DistributedOptimizer as keras_distributed_optimizer
    return keras_distributed_optimizer(optimizer, *args, **kwargs)


def PartialDistributedOptimizer(optimizer, *args, **kwargs):
    """For a Keras optimizer, the same as ``hvdlite.tensorflow.keras.PartialDistributedOptimizer``."""
    from .keras.optimizer import PartialDistributedOptimizer as keras_partial_distributed_optimizer
    return keras_partial_distributed_optimizer(optimizer, *args, **kwargs)
