"""Runs a NumPy-level collective (numpy_collectives.py) on TensorFlow tensors, eagerly or inside a graph.

Eager: the body is called at once on the tensors' host buffers (``EagerTensor._numpy()``: a view, where the
public ``numpy()`` makes a copy), and its outputs become tensors through DLPack, which adopts the NumPy buffer
instead of copying it. Graph (``tf.function``, or a TF1 ``tf.compat.v1`` graph run by a session): the body
becomes a stateful ``tf.numpy_function``. Every rank must run its collectives in the order the program wrote
them, or blocking collectives deadlock across ranks: inside ``tf.function`` the automatic control dependencies
of stateful ops keep that order; a TF1 graph has none, so each collective takes the order token of the one
created before it in the same graph as an input (a session that fetches a later collective runs the earlier ones
too, on every rank alike).
Outputs get the static shapes the caller knows (None where a dimension depends on other ranks). Errors are
TensorFlow's classes, eagerly and in graphs (errors.py).
"""
import re
import weakref

import numpy as np
import tensorflow as tf

from hvdlite import requests as core_requests

from . import errors


def collective_name(kind, name, process_set=None):
    """The name that identifies a collective across the ranks of its process set.

    A given ``name`` is used as is. Otherwise: eagerly, the core's call counter of the process set (identical on
    its ranks when they call collectives in the same order); in a graph, a name unique within the traced
    function, fixed at trace time, so that every step of a compiled function reuses it (and hits the core's
    response cache). Both are counted per process set: a rank outside a set skips that set's collectives
    without shifting the names of the others.
    """
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        return core_requests.auto_name(kind, process_set)
    set_id = getattr(process_set, "process_set_id", 0) or 0
    base = "Hvdlite" + "".join(word.capitalize() for word in kind.split("_")) + (f"Set{set_id}" if set_id else "")
    graph = tf.compat.v1.get_default_graph()
    return f"{_graph_path(graph)}/{graph.unique_name(base)}"


def _graph_path(graph):
    """The traced function's name with the control-flow graphs it is nested in ("train_step/cond_true").

    TensorFlow suffixes cond branches and loop bodies with a process-wide counter ("cond_true_6"), which differs
    between ranks that traced different amounts before; the suffix is dropped. Equal paths are harmless: the
    ops of one function run in program order, so two collectives with one name are never in flight together.
    """
    parts = []
    while graph is not None and hasattr(graph, "outer_graph"):
        parts.append(re.sub(r"_\d+$", "", graph.name))
        graph = graph.outer_graph
    return "/".join(reversed(parts)) or getattr(graph, "name", "graph")  # a TF1 Graph has no name


_last_token = weakref.WeakKeyDictionary()  # TF1 graph -> the order token of the collective created last in it


def _graph_op(body, inputs, out_dtypes, out_shapes, name, after=()):
    """The collective as a graph op (run after the ``after`` tensors, which it takes as extra inputs: a data
    dependency), and the check that raises its error (errors.py); returns its outputs, ordered after the check, and
    its status (an int8 scalar): the token a later collective waits for, which a failure does not hold up (the
    later one's own check raises what it must)."""
    checked = errors.status_of(lambda *arrays: body(*arrays[:len(inputs)]), out_dtypes, out_shapes)
    *outputs, status, message = tf.numpy_function(checked, inputs + list(after), out_dtypes + [tf.int8, tf.string],
                                                  stateful=True, name=name)
    with tf.control_dependencies([errors.raise_on_failure(status, message, name)]):
        return (tf.identity_n(outputs) if outputs else []), status


def _in_program_order(graph, body, inputs, out_dtypes, out_shapes, name):
    """A collective op of a TF1 graph that runs after the one created before it: each op takes the previous
    one's order token (a scalar output) as an extra input, a data dependency (a control dependency would mark
    the earlier op, which TensorFlow refuses once a session has run it)."""
    previous = _last_token.get(graph)
    outputs, token = _graph_op(body, inputs, out_dtypes, out_shapes, name, after=[] if previous is None else [previous])
    _last_token[graph] = token
    return outputs


def as_tensor(value):
    if isinstance(value, tf.Tensor):
        return value
    return tf.convert_to_tensor(value)


def run(body, inputs, out_dtypes, out_shapes, op_name):
    """``body(*arrays) -> list of arrays``; returns the list of output tensors."""
    inputs = [as_tensor(t) for t in inputs]
    if tf.executing_eagerly():
        arrays = [_host_view(t) for t in inputs]
        with errors.tensorflow_errors():
            results = body(*arrays)
        return [_adopt(out, dtype) for out, dtype in zip(results, out_dtypes)]
    graph = tf.compat.v1.get_default_graph()
    if hasattr(graph, "outer_graph"):  # tf.function: automatic control dependencies keep program order
        outputs, _ = _graph_op(body, inputs, list(out_dtypes), list(out_shapes), _graph_op_name(op_name))
    else:
        outputs = _in_program_order(graph, body, inputs, list(out_dtypes), list(out_shapes), _graph_op_name(op_name))
    for out, shape in zip(outputs, out_shapes):
        out.set_shape(shape)
    return list(outputs)


def _host_view(tensor):
    """The eager tensor's data as a NumPy array, without a copy where TensorFlow allows it."""
    if tensor.device.endswith("CPU:0") and hasattr(tensor, "_numpy"):
        return np.asarray(tensor._numpy())
    return tensor.numpy()


def _adopt(array, dtype):
    """An eager tensor over the array's buffer (no copy); bfloat16 travels as its uint16 bit pattern, because
    DLPack has no code for NumPy's (ml_dtypes) bfloat16."""
    if dtype == tf.bfloat16:
        return tf.bitcast(_adopt(array.view(np.uint16), tf.uint16), tf.bfloat16)
    try:
        tensor = tf.experimental.dlpack.from_dlpack(array.__dlpack__())
    except (AttributeError, TypeError, ValueError, BufferError, tf.errors.OpError):
        return tf.convert_to_tensor(array, dtype=dtype)
    return tensor if tensor.dtype == dtype else tf.cast(tensor, dtype)


def _graph_op_name(name):
    """A valid TensorFlow op name derived from the collective's name (for reading graphs and traces)."""
    cleaned = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in name.split("/")[-1])
    return cleaned if cleaned[:1].isalnum() else "hvdlite_" + cleaned
