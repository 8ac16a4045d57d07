"""TensorFlow collectives with Horovod's names and arguments.

Each works on eager tensors and inside ``tf.function``, and is differentiable where that means something:
the gradient of an allreduce is an allreduce, of an allgather a sum-reduce sliced to this rank's rows,
of a broadcast an average over the ranks kept on the root, of an alltoall the reverse alltoall, of a
reducescatter an allgather.
The work itself is done by numpy_collectives.py through tensor_bridge.py.
"""
import numpy as np
import tensorflow as tf

try:  # TensorFlow's own test for "is any gradient tape recording now?"
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:  # pragma: no cover - a TensorFlow without it: always wrap
    def _could_record():
        return True

from hvdlite import basics
from hvdlite import ops as core_ops
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum
from hvdlite.requests import Collective, output_first_dim
from hvdlite.process_sets import global_process_set

from . import numpy_collectives
from . import tensor_bridge as bridge
from .compression import Compression

# Library code runs as written inside tf.function: AutoGraph must not rewrite its Python control flow.
_not_converted = tf.autograph.experimental.do_not_convert

_REDUCE_OPS = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}


handle_average_backwards_compatibility = core_ops.handle_average_backwards_compatibility  # Horovod's rule


def _check_op(op):
    if op not in _REDUCE_OPS:
        raise ValueError(f"unknown reduce op {op!r}; use one of hvdlite's Average, Sum, Adasum, Min, Max, Product")
    return op


def _differentiable(inputs, forward, backward):
    """Runs ``forward(inputs) -> outputs`` under a custom gradient ``backward(inputs, outputs, grads)``.

    Only floating inputs can carry a gradient, and eagerly only while a tape records; otherwise the forward
    runs bare (tf.custom_gradient adds identity ops and tape bookkeeping to every call)."""
    if not any(t.dtype.is_floating or t.dtype.is_complex for t in inputs):
        return forward(inputs)
    if tf.executing_eagerly() and not _could_record():
        return forward(inputs)

    @tf.custom_gradient
    def op(*xs):
        ys = forward(list(xs))

        def grad(*dys):
            dys = [tf.zeros_like(y) if dy is None else dy for y, dy in zip(ys, dys)]
            grads = backward(list(xs), ys, dys)
            return [g if x.dtype.is_floating else None for g, x in zip(grads, xs)]
        return ys, grad
    return list(op(*inputs))


# --- allreduce -----------------------------------------------------------------------------------------------

def _allreduce_group(tensors, names, op, prescale_factor, postscale_factor, process_set, differentiable=True):
    def forward(xs):
        def body(*arrays):
            return numpy_collectives.allreduce(arrays, names, op, prescale_factor, postscale_factor,
                                               process_set)
        return bridge.run(body, xs, [x.dtype for x in xs], [x.shape for x in xs], names[0])

    def backward(xs, ys, dys):
        return _allreduce_gradients(xs, ys, dys, names, op, prescale_factor, postscale_factor, process_set)
    inputs = [bridge.as_tensor(t) for t in tensors]
    return _differentiable(inputs, forward, backward) if differentiable else forward(inputs)


def _allreduce_gradients(xs, ys, dys, names, op, prescale_factor, postscale_factor, process_set):
    grad_names = [n + ".grad" for n in names]
    if op in (Average, Sum):
        # y = post * op_i(pre * x_i): every rank's x contributes to every rank's y with the same weight.
        return _allreduce_group(dys, grad_names, op, prescale_factor, postscale_factor, process_set)
    scale = prescale_factor * postscale_factor
    summed = _allreduce_group(dys, grad_names, Sum, 1.0, 1.0, process_set)
    if op in (Min, Max):
        # The ranks holding the extreme value share the gradient equally, as tf.reduce_max does.
        hits = [tf.cast(tf.equal(x * prescale_factor * postscale_factor, y), y.dtype) for x, y in zip(xs, ys)]
        counts = _allreduce_group(hits, [n + ".grad_ties" for n in names], Sum, 1.0, 1.0, process_set)
        return [s * h / c * scale for s, h, c in zip(summed, hits, counts)]
    if op == Product:
        # d(prod_k x_k)/dx_r = prod_{k != r} x_k, computed from the gathered inputs (exact when some x is 0).
        rank, size = process_set.rank(), process_set.size()
        gathered = _allgather_group([tf.expand_dims(x, 0) for x in xs], [n + ".grad_inputs" for n in names],
                                    process_set)
        grads = []
        for s, g in zip(summed, gathered):
            others = tf.reduce_prod(tf.concat([g[:rank], g[rank + 1:]], axis=0), axis=0)
            grads.append(s * others * (prescale_factor ** size) * postscale_factor)
        return grads
    raise NotImplementedError(f"the {_REDUCE_OPS[op]} allreduce has no gradient")


def _allreduce_indexed_slices(slices, op, prescale_factor, postscale_factor, name, process_set):
    """An IndexedSlices is reduced by gathering its values and indices from every rank."""
    if op not in (Average, Sum):
        raise NotImplementedError(f"the {_REDUCE_OPS[op]} reduction does not support tf.IndexedSlices; "
                                  "use sparse_as_dense=True or convert the gradient to a dense tensor")
    base = bridge.collective_name("allreduce", name, process_set)
    values, indices = grouped_allgather([slices.values, slices.indices], name=base, process_set=process_set)
    return tf.IndexedSlices(_scaled_values(values, op, prescale_factor * postscale_factor, process_set.size()),
                            indices, dense_shape=slices.dense_shape)


def _scaled_values(values, op, scale, size):
    """Gathered IndexedSlices values, averaged and scaled as Horovod does: an Average is TensorFlow's true division
    by the set size (integer values become floating, as ``values / size`` makes them), then the scale factors; a
    scaled Sum of integers is computed in float64 and cast back, as the core scales integer tensors."""
    if op == Average:
        values = tf.math.truediv(values, tf.cast(size, values.dtype))
    if scale == 1.0:
        return values
    if values.dtype.is_integer:
        return tf.cast(tf.cast(values, tf.float64) * scale, values.dtype)
    return values * tf.constant(scale, dtype=values.dtype)


@_not_converted
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces ``tensor`` over the process set (Average by default) and returns the result.

    A ``tf.IndexedSlices`` is allgathered instead (values and indices), which represents the same sum.
    ``compression`` casts the tensor for the wire; the result has the input's dtype.
    """
    op = _check_op(handle_average_backwards_compatibility(op, average))
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, prescale_factor, postscale_factor, name, process_set)
    compressed, ctx = compression.compress(bridge.as_tensor(tensor))
    name = bridge.collective_name("allreduce", name, process_set)
    reduced = _allreduce_group([compressed], [name], op, prescale_factor, postscale_factor, process_set)[0]
    return compression.decompress(reduced, ctx)


@_not_converted
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces a list of tensors as one group (one negotiation, fused where dtypes allow)."""
    op = _check_op(handle_average_backwards_compatibility(op, average))
    tensors = list(tensors)
    if not tensors:
        return []
    base = bridge.collective_name("grouped_allreduce", name, process_set)
    results = [None] * len(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = _allreduce_indexed_slices(t, op, prescale_factor, postscale_factor, f"{base}.{i}",
                                                   process_set)
    if dense:
        compressed, ctxs = zip(*[compression.compress(bridge.as_tensor(tensors[i])) for i in dense])
        reduced = _allreduce_group(list(compressed), [f"{base}.{i}" for i in dense], op, prescale_factor,
                                   postscale_factor, process_set)
        for i, r, ctx in zip(dense, reduced, ctxs):
            results[i] = compression.decompress(r, ctx)
    return results


# --- allgather -----------------------------------------------------------------------------------------------

def _allgather_group(tensors, names, process_set):
    def forward(xs):
        def body(*arrays):
            return numpy_collectives.allgather(arrays, names, process_set)
        shapes = [tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else x.shape for x in xs]
        return bridge.run(body, xs, [x.dtype for x in xs], shapes, names[0])

    def backward(xs, ys, dys):
        # Each rank's rows of the gathered result: sum the upstream gradients over ranks, keep our slice.
        rank = process_set.rank()
        rows = [tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1]) for x in xs]
        all_rows = _allgather_group(rows, [n + ".grad_rows" for n in names], process_set)
        # Averaged over the ranks, as Horovod does (and as hvdlite.torch's allgather gradient is).
        averaged = _allreduce_group(dys, [n + ".grad" for n in names], Average, 1.0, 1.0, process_set)
        grads = []
        for x, counts, s in zip(xs, all_rows, averaged):
            start = tf.reduce_sum(counts[:rank])
            grads.append(s[start:start + tf.shape(x, out_type=tf.int64)[0]])
        return grads
    return _differentiable([bridge.as_tensor(t) for t in tensors], forward, backward)


@_not_converted
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates ``tensor`` from every rank along the first dimension (which may differ between ranks)."""
    return _allgather_group([tensor], [bridge.collective_name("allgather", name, process_set)], process_set)[0]


@_not_converted
def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    tensors = list(tensors)
    if not tensors:
        return []
    base = bridge.collective_name("grouped_allgather", name, process_set)
    return _allgather_group(tensors, [f"{base}.{i}" for i in range(len(tensors))], process_set)


# --- broadcast -----------------------------------------------------------------------------------------------

def _broadcast_group(tensors, names, root_rank, process_set):
    def forward(xs):
        def body(*arrays):
            return numpy_collectives.broadcast(arrays, names, root_rank, process_set)
        return bridge.run(body, xs, [x.dtype for x in xs], [x.shape for x in xs], names[0])

    def backward(xs, ys, dys):
        # Horovod's gradient (and hvdlite.torch's): the upstream gradients averaged over the set, on the root only.
        averaged = _allreduce_group(dys, [n + ".grad" for n in names], Average, 1.0, 1.0, process_set)
        if basics.rank() == root_rank:  # roots are global ranks, as in Horovod
            return averaged
        # s * 0, not tf.zeros_like(s): in a graph, zeros_like of a known shape drops its input, and the ranks'
        # graphs would then run different collectives.
        return [s * tf.zeros([], s.dtype) for s in averaged]
    return _differentiable([bridge.as_tensor(t) for t in tensors], forward, backward)


@_not_converted
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Returns the root rank's ``tensor`` on every rank (``root_rank`` is a global rank, also for a process set,
    as in Horovod)."""
    name = bridge.collective_name("broadcast", name, process_set)
    return _broadcast_group([tensor], [name], root_rank, process_set)[0]


@_not_converted
def grouped_broadcast(tensors, root_rank, name=None, process_set=global_process_set):
    tensors = list(tensors)
    if not tensors:
        return []
    base = bridge.collective_name("grouped_broadcast", name, process_set)
    return _broadcast_group(tensors, [f"{base}.{i}" for i in range(len(tensors))], root_rank, process_set)


# --- alltoall ------------------------------------------------------------------------------------------------

def _alltoall(tensor, splits, name, process_set):
    has_splits = splits is not None
    splits_tensor = tf.cast(bridge.as_tensor(splits), tf.int32) if has_splits else tf.zeros([0], tf.int32)

    def forward(xs):
        x, = xs

        def body(array, split_array):
            return numpy_collectives.alltoall(array, split_array if has_splits else None, name, process_set)
        shape = tf.TensorShape([None]).concatenate(x.shape[1:]) if x.shape.rank else x.shape
        return bridge.run(body, [x, splits_tensor], [x.dtype, tf.int32], [shape, [process_set.size()]], name)

    def backward(xs, ys, dys):
        received_splits = ys[1]
        return [_alltoall(dys[0], received_splits, name + ".grad", process_set)[0]]
    return _differentiable([bridge.as_tensor(tensor)], forward, backward)


@_not_converted
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to rank i (equal parts when None) and returns the received rows,
    concatenated in rank order; with ``splits`` given, ``(received tensor, received_splits)``, as Horovod does."""
    output, received = _alltoall(tensor, splits, bridge.collective_name("alltoall", name, process_set), process_set)
    return output if splits is None else (output, tf.stop_gradient(received))


# --- reducescatter -------------------------------------------------------------------------------------------

def _reducescatter_group(tensors, names, op, prescale_factor, postscale_factor, process_set):
    size, rank = process_set.size(), process_set.rank()

    def out_shape(x):
        if not x.shape.rank:
            return x.shape
        dim0 = x.shape[0]
        rows = None if dim0 is None else output_first_dim(Collective.REDUCESCATTER, dim0, size, rank)
        return tf.TensorShape([rows]).concatenate(x.shape[1:])

    def forward(xs):
        def body(*arrays):
            return numpy_collectives.reducescatter(arrays, names, op, prescale_factor, postscale_factor,
                                                   process_set)
        return bridge.run(body, xs, [x.dtype for x in xs], [out_shape(x) for x in xs], names[0])

    def backward(xs, ys, dys):
        # Horovod's convention: the upstream gradients gathered, times the set size for a Sum (as a Sum's
        # gradient averaged over the ranks would be), as they are for an Average.
        if op not in (Average, Sum):
            raise NotImplementedError(f"the {_REDUCE_OPS[op]} reducescatter has no gradient")
        gathered = _allgather_group(dys, [n + ".grad" for n in names], process_set)
        scale = prescale_factor * postscale_factor * (size if op == Sum else 1)
        return [g if scale == 1.0 else g * tf.constant(scale, dtype=g.dtype) for g in gathered]
    return _differentiable([bridge.as_tensor(t) for t in tensors], forward, backward)


@_not_converted
def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  ignore_name_scope=False, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces ``tensor`` over the process set and returns this rank's block of rows
    (the first ``dim0 % size`` ranks get one row more)."""
    op = _check_op(op)
    compressed, ctx = compression.compress(bridge.as_tensor(tensor))
    name = bridge.collective_name("reducescatter", name, process_set)
    out = _reducescatter_group([compressed], [name], op, prescale_factor, postscale_factor, process_set)[0]
    return compression.decompress(out, ctx)


@_not_converted
def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0, name=None):
    op = _check_op(op)
    tensors = list(tensors)
    if not tensors:
        return []
    compressed, ctxs = zip(*[compression.compress(bridge.as_tensor(t)) for t in tensors])
    base = bridge.collective_name("grouped_reducescatter", name, process_set)
    out = _reducescatter_group(list(compressed), [f"{base}.{i}" for i in range(len(tensors))], op,
                               prescale_factor, postscale_factor, process_set)
    return [compression.decompress(o, c) for o, c in zip(out, ctxs)]


# --- join and barrier ----------------------------------------------------------------------------------------

@_not_converted
def join(device=""):
    """Blocks until every rank has joined; ranks that joined early contribute zeros to the collectives the
    others still run. Returns the last rank to join (an int32 tensor)."""
    def body():
        return [np.asarray(core_ops.join(), dtype=np.int32)]
    return bridge.run(body, [], [tf.int32], [[]], "join")[0]


@_not_converted
def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set has reached the barrier."""
    def body():
        core_ops.barrier(process_set=process_set)
        return [np.zeros([], dtype=np.int32)]
    out = bridge.run(body, [], [tf.int32], [[]], "barrier")[0]
    return None if tf.executing_eagerly() else out
