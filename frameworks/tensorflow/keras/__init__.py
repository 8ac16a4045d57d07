"""hvdlite for Keras 3 on TensorFlow: ``import hvdlite.tensorflow.keras as hvd`` (or ``hvdlite.keras``).

The core's queries and process sets, ``DistributedOptimizer`` for Keras 3 optimizers, the callbacks, and
``load_model``. ``allreduce``/``allgather``/``broadcast``/``reducescatter`` here take and return values
(NumPy arrays), as Horovod's Keras functions do; the tensor versions are in ``hvdlite.tensorflow``.
"""
from hvdlite.basics import (cross_rank, cross_size, cuda_built, gloo_built, gloo_enabled, init,  # noqa: F401
                            is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                            start_timeline, stop_timeline)
from hvdlite.errors import HorovodInternalError, HvdliteError  # noqa: F401
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                  remove_process_set)

from .. import mpi_ops as _tf_ops
from ..compression import Compression  # noqa: F401
from ..functions import allgather_object, broadcast_object, broadcast_variables  # noqa: F401
from . import callbacks  # noqa: F401
from .optimizer import DistributedOptimizer  # noqa: F401
from .saving import load_model  # noqa: F401


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none, process_set=global_process_set):
    """Returns ``value`` (a number, array or tensor) reduced across ranks, as a NumPy array."""
    return _tf_ops.allreduce(value, average=average, compression=compression, op=op,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor, name=name,
                             process_set=process_set).numpy()


def allgather(value, name=None, process_set=global_process_set):
    """Returns ``value`` concatenated along its first dimension across ranks, as a NumPy array."""
    return _tf_ops.allgather(value, name=name, process_set=process_set).numpy()


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Returns the root rank's ``value`` on every rank, as a NumPy array."""
    return _tf_ops.broadcast(value, root_rank, name=name, process_set=process_set).numpy()


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """Returns this rank's block of ``value`` reduced across ranks, as a NumPy array."""
    return _tf_ops.reducescatter(value, op=op, name=name, process_set=process_set).numpy()
