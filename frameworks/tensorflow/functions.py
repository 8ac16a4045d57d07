"""Helpers built on the collectives: broadcasting variables, and Python objects between ranks."""
import tensorflow as tf

from hvdlite import ops as core_ops
from hvdlite.process_sets import global_process_set

from . import tensor_bridge as bridge
from .mpi_ops import grouped_broadcast


@tf.autograph.experimental.do_not_convert
def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns the root rank's values to ``variables`` (tf.Variable or keras.Variable) on every rank.

    All variables travel as one group. Eagerly this returns None once the values are assigned; inside a
    graph it returns the op that assigns them. The variables are matched across ranks by position, so every
    rank must pass the same list (the core reports differing shapes or dtypes as an error on every rank).
    """
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    name = bridge.collective_name("broadcast_variables", None, process_set)
    values = grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank, name=name,
                               process_set=process_set)
    assigns = [v.assign(value) for v, value in zip(variables, values)]
    if tf.executing_eagerly():
        return None
    return tf.group(*[a for a in assigns if a is not None])


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns the root rank's picklable ``obj`` on every rank. ``session`` is accepted for Horovod's
    signature and ignored (TensorFlow 2 has no sessions)."""
    return core_ops.broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns a function ``obj -> broadcast_object(obj, ...)`` with these arguments bound."""
    def fn(obj):
        return broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's picklable ``obj``, in rank order."""
    return core_ops.allgather_object(obj, name=name, process_set=process_set)
