"""Horovod's ``*_op`` queries: the answers as int32 tensors, for code that wants them inside a graph."""
import tensorflow as tf

from hvdlite import basics
from hvdlite.process_sets import ProcessSet, global_process_set, process_set_by_id


def _process_set(process_set_id):
    """Horovod passes process set ids; a ProcessSet object is accepted too."""
    if isinstance(process_set_id, ProcessSet):
        return process_set_id
    return global_process_set if process_set_id is None else process_set_by_id(process_set_id)


def size_op(process_set_id=0, name=None):
    """The number of ranks in the process set (the job by default)."""
    return tf.constant(_process_set(process_set_id).size(), dtype=tf.int32, name=name)


def rank_op(name=None):
    return tf.constant(basics.rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    return tf.constant(basics.local_size(), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    return tf.constant(basics.local_rank(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    return tf.constant(int(_process_set(process_set_id).included()), dtype=tf.int32, name=name)


def is_initialized_op(name=None):
    return tf.constant(int(basics.is_initialized()), dtype=tf.int32, name=name)
