"""hvdlite for Keras 3 on TensorFlow: ``import hvdlite.tensorflow.keras as hvd`` (or ``hvdlite.keras``).

The core's queries and process sets, ``DistributedOptimizer`` for Keras 3 optimizers, the callbacks, and
``load_model``. ``allreduce``/``allgather``/``broadcast``/``reducescatter`` here take values (numbers, arrays or
tensors) and return tensors, as Horovod's Keras functions do when executing eagerly.
"""
from hvdlite.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,  # noqa: F401
                            gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                            mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown,
                            size, start_timeline, stop_timeline)
from hvdlite.errors import HorovodInternalError, HvdliteError  # noqa: F401
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                  remove_process_set)

from .. import mpi_ops as _tf_ops
from ..compression import Compression  # noqa: F401
from ..functions import (allgather_object, broadcast_, broadcast_global_variables, broadcast_object,  # noqa: F401
                         broadcast_variables)
from ..sync_batch_norm import SyncBatchNormalization  # noqa: F401
from . import callbacks, elastic  # noqa: F401
from .optimizer import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401
from .saving import load_model  # noqa: F401


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, process_set=global_process_set):
    """Returns ``value`` (a number, array or tensor) reduced across ranks, as a tensor (as Horovod returns it
    when executing eagerly)."""
    return _tf_ops.allreduce(value, average=average, compression=compression, op=op,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor, name=name,
                             process_set=process_set)


def allgather(value, name=None, process_set=global_process_set):
    """Returns ``value`` concatenated along its first dimension across ranks, as a tensor."""
    return _tf_ops.allgather(value, name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Returns the root rank's ``value`` on every rank, as a tensor."""
    return _tf_ops.broadcast(value, root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """Returns this rank's block of ``value`` reduced across ranks, as a tensor."""
    return _tf_ops.reducescatter(value, op=op, name=name, process_set=process_set)
