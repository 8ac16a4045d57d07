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


@tf.autograph.experimental.do_not_convert
def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites each variable of ``variables`` with its value on ``root_rank``, in place; returns the list of
    their new values (eagerly the variables themselves, in a graph the assignments' values), as Horovod's
    in-place broadcast does."""
    variables = list(variables)
    if not variables:
        return []
    name = bridge.collective_name("broadcast_", name, process_set)
    values = grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank, name=name,
                               process_set=process_set)
    return [v.assign(value) for v, value in zip(variables, values)]


def broadcast_global_variables(root_rank):
    """The op that assigns the root rank's values to every global variable of the TF1 graph (for
    ``tf.compat.v1`` sessions). Eagerly there is no global collection: use ``broadcast_variables`` with the
    model's and the optimizer's variables, as Horovod asks too."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. Please use "
                           "`hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns the root rank's picklable ``obj`` on every rank. ``session`` is accepted for Horovod's
    signature and not needed: objects travel through the core directly, in graph mode too."""
    return core_ops.broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns a function ``obj -> broadcast_object(obj, ...)`` with these arguments bound."""
    def fn(obj):
        return broadcast_object(obj, root_rank=root_rank, name=name, process_set=process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's picklable ``obj``, in rank order."""
    return core_ops.allgather_object(obj, name=name, process_set=process_set)
