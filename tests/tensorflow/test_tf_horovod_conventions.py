"""Horovod's TensorFlow conventions where a script meets them, checked on every rank against values computed here:
the error classes of failed collectives (eager, tf.function, TF1 session), gradients of collectives in TF1 graphs
run in a loop of session calls (nothing may hang), integer IndexedSlices averaged, alltoall's return value and
int32 splits with data of any dtype, reducescatter's gradient in a TF1 graph, TensorFlowState saving on sync, and a
model whose layers are reduced over different process sets, trained through DistributedGradientTape in a
tf.function.
"""
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import hvdlite.tensorflow as hvd

tf.get_logger().setLevel("ERROR")
# TensorFlow's own thread pools at their defaults: TF1 graphs may then run independent ops at once.
# 2 ranks only: the adapter hands any rank count to the same core, whose tests run 2, 3 and 4 ranks.
pytestmark = [pytest.mark.ranks(2),
              pytest.mark.hvd_env(TF_CPP_MIN_LOG_LEVEL=2, HVDLITE_STALL_CHECK_TIME_SECONDS=10,
                                  HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)]
RANK = SIZE = None


@pytest.fixture(scope="module", autouse=True)
def started():
    global RANK, SIZE
    hvd.init()
    RANK, SIZE = hvd.rank(), hvd.size()


def session():
    return tf.compat.v1.Session()


def in_tf1_graph(build):
    """build() made in a TF1 graph and run by a session: its fetched value, or the error it raised."""
    with tf.Graph().as_default():
        fetch = build()
        with session() as s:
            return s.run(fetch)


def in_function(build):
    return tf.function(build)()


MODES = {"eager": lambda build: build(), "tf.function": in_function, "TF1 session": in_tf1_graph}


# --- errors --------------------------------------------------------------------------------------------------

def mismatches():
    """Collectives whose ranks disagree: (label, build, words the error names)."""
    last = SIZE - 1
    return [
        ("allreduce shapes", lambda: hvd.allreduce(tf.ones([2 + RANK]), name="conv.shape"),
         ["conv.shape", "rank 0 sent [2]", f"rank {last} sent [{2 + last}]"]),
        ("allgather dtypes", lambda: hvd.allgather(tf.ones([2], tf.int32 if RANK == last else tf.float32),
                                                  name="conv.dtype"), ["conv.dtype", "int32", "float32"]),
        ("broadcast roots", lambda: hvd.broadcast(tf.ones([2]), RANK, name="conv.root"), ["conv.root", "root"]),
        ("alltoall dtypes", lambda: hvd.alltoall(tf.ones([SIZE], tf.int64 if RANK == last else tf.float32),
                                                name="conv.a2a"), ["conv.a2a", "int64", "float32"]),
        ("reducescatter shapes", lambda: hvd.reducescatter(tf.ones([SIZE, 1 + RANK]), op=hvd.Sum,
                                                          name="conv.rs"), ["conv.rs", "shape"]),
    ]


def bad_arguments():
    """Collectives this rank's arguments make impossible: (label, build, words the error names)."""
    return [
        ("alltoall splits that do not add up", lambda: hvd.alltoall(tf.ones([5]), splits=[1] * SIZE,
                                                                   name="conv.splits")[0],
         ["conv.splits", "splits"]),
        ("alltoall rows not divisible by the set", lambda: hvd.alltoall(tf.ones([SIZE + 1]), name="conv.rows"),
         ["conv.rows"]),
        ("a dtype the core does not carry", lambda: hvd.allreduce(tf.ones([2], tf.complex64), name="conv.complex"),
         ["conv.complex", "complex64"]),
        # The collectives along the first dimension take no scalar (min_ndim of their description in the header).
        ("a scalar to allgather", lambda: hvd.allgather(tf.constant(1.0), name="conv.scalar_ag"),
         ["conv.scalar_ag", "allgather", "dimension"]),
        ("a scalar to reducescatter", lambda: hvd.reducescatter(tf.constant(1.0), name="conv.scalar_rs"),
         ["conv.scalar_rs", "reducescatter", "dimension"]),
    ]


@pytest.mark.parametrize("mode", list(MODES))
def test_failed_collectives_raise_tensorflows_error_classes(mode, checks):
    run = MODES[mode]
    for label, build, words in mismatches():
        error = checks.raises(f"{mode}: {label}", tf.errors.FailedPreconditionError, run, build, match=words)
        if mode == "eager" and error is not None:
            checks.true(f"{mode}: {label} is also a HorovodInternalError",
                        isinstance(error, hvd.HorovodInternalError), type(error).__mro__)
    for label, build, words in bad_arguments():
        error = checks.raises(f"{mode}: {label}", tf.errors.InvalidArgumentError, run, build, match=words)
        if mode == "eager" and error is not None:
            checks.true(f"{mode}: {label} is also a ValueError or TypeError",
                        isinstance(error, (ValueError, TypeError)), type(error).__mro__)
    # After the errors, the same names work on every rank.
    checks.close(f"{mode}: a good collective after them",
                 run(lambda: hvd.allreduce(tf.ones([2]), name="conv.shape", op=hvd.Sum)), [SIZE, SIZE])


def test_a_failure_in_a_tf1_graph_holds_up_no_later_collective(checks):
    with tf.Graph().as_default():
        bad = hvd.allreduce(tf.ones([2 + RANK]), name="conv.graph.bad")
        good = hvd.allreduce(tf.ones([3]) * (RANK + 1), op=hvd.Sum, name="conv.graph.good")
        with session() as s:
            checks.raises("the failing collective", tf.errors.FailedPreconditionError, s.run, bad,
                          match=["conv.graph.bad"])
            checks.close("the next one in program order", s.run(good), np.full(3, SIZE * (SIZE + 1) / 2))


# --- TF1 graphs: gradients in a loop of session calls ---------------------------------------------------------

def test_tf1_gradients_of_collectives_built_and_run_in_a_loop_finish(checks):
    sizes = [3, 2, 7][:SIZE]
    with tf.Graph().as_default(), session() as s:
        for dtype, dim, root in itertools.product([tf.float32, tf.float64], [1, 2, 3], range(SIZE)):
            x = tf.cast(tf.ones([5] * dim) * RANK, dtype)
            grad = tf.gradients(hvd.broadcast(x, root), x, tf.ones([5] * dim, dtype))[0]
            checks.close(f"broadcast grad {dtype.name} {dim}d root {root}", s.run(grad),
                         np.full([5] * dim, 1 if RANK == root else 0))
        for dtype, dim in itertools.product([tf.float32, tf.float64], [1, 2, 3]):
            x = tf.cast(tf.ones([sizes[RANK]] + [4] * (dim - 1)) * RANK, dtype)
            grad_ys = tf.concat([tf.ones([sizes[r]] + [4] * (dim - 1), dtype) * r for r in range(SIZE)], 0)
            grad = tf.gradients(hvd.allgather(x), x, grad_ys)[0]
            checks.close(f"allgather grad {dtype.name} {dim}d", s.run(grad), np.full(grad.shape, RANK))
            xs = [x, tf.cast(tf.ones([2, 3]) * RANK, dtype)]
            gathered = hvd.grouped_allgather(xs)
            grads = tf.gradients(gathered, xs, [grad_ys, tf.ones([2 * SIZE, 3], dtype) * (RANK + 1)])
            got = s.run(grads)
            checks.close(f"grouped allgather grad 0 {dtype.name} {dim}d", got[0], np.full(got[0].shape, RANK))
            checks.close(f"grouped allgather grad 1 {dtype.name} {dim}d", got[1],
                         np.full((2, 3), (SIZE + 1) / 2))


def test_tf1_graph_of_several_collectives_and_gradients_runs_again_and_again(checks):
    with tf.Graph().as_default():
        x = tf.constant(np.arange(6, dtype=np.float64).reshape(2, 3) + RANK)
        y = hvd.allreduce(x, op=hvd.Sum) + hvd.broadcast(x, SIZE - 1)
        z = tf.reduce_sum(hvd.allgather(y) ** 2) + tf.reduce_sum(hvd.reducescatter(tf.tile(x, [SIZE, 1]), op=hvd.Sum))
        grad = tf.gradients(z, x)[0]
        with session() as s:
            results = [s.run([y, grad]) for _ in range(8)]
    inputs = [np.arange(6, dtype=np.float64).reshape(2, 3) + r for r in range(SIZE)]
    want_y = np.sum(inputs, 0) + inputs[SIZE - 1]
    for step, (got_y, got_grad) in enumerate(results):
        checks.close(f"step {step}: value", got_y, want_y)
        checks.true(f"step {step}: the gradient is the same every step", np.array_equal(got_grad, results[0][1]))


# --- IndexedSlices, alltoall, reducescatter ------------------------------------------------------------------

def slices_of(rank, dtype):
    values = (np.arange(6).reshape(2, 3) + 3 * rank).astype(dtype.as_numpy_dtype)
    return values, np.array([rank % 4, (rank + 2) % 4], np.int64)


def reduce_slices(dtype, op, prescale=1.0, postscale=1.0, grouped=False):
    values, indices = slices_of(RANK, dtype)
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant([4, 3], tf.int64))
    if grouped:  # beside a dense tensor in one group
        out, dense = hvd.grouped_allreduce([sparse, tf.ones([2], dtype)], op=op, prescale_factor=prescale,
                                           postscale_factor=postscale)
        return out.values, out.indices, dense
    out = hvd.allreduce(sparse, op=op, prescale_factor=prescale, postscale_factor=postscale)
    return out.values, out.indices


@pytest.mark.parametrize("mode", ["eager", "TF1 session"])
def test_integer_indexed_slices_are_averaged_as_horovod_does(mode, checks):
    run = MODES[mode]
    for dtype, scale in itertools.product([tf.int32, tf.int64, tf.float32], [(1.0, 1.0), (2.0, 0.5), (3.0, 1.0)]):
        gathered = np.concatenate([slices_of(r, dtype)[0] for r in range(SIZE)]).astype(np.float64)
        indices = np.concatenate([slices_of(r, dtype)[1] for r in range(SIZE)])
        label = f"{mode} {dtype.name} x{scale[0] * scale[1]}"
        values, got_indices = run(lambda: reduce_slices(dtype, hvd.Average, *scale))
        # TensorFlow's true division: integers become floating (float64 for int32 and int64).
        checks.true(f"{label}: averaged values are floating", np.asarray(values).dtype.kind == "f",
                    np.asarray(values).dtype)
        checks.close(f"{label}: averaged values", values, gathered * scale[0] * scale[1] / SIZE, 1e-6)
        checks.close(f"{label}: indices", got_indices, indices)
        values, _, dense = run(lambda: reduce_slices(dtype, hvd.Average, *scale, grouped=True))
        checks.close(f"{label}: averaged values beside a dense tensor", values, gathered * scale[0] * scale[1] / SIZE,
                     1e-6)
        checks.close(f"{label}: the dense tensor", dense, np.full(2, scale[0] * scale[1]), 1e-6)
        values, _ = run(lambda: reduce_slices(dtype, hvd.Sum, *scale))
        want = gathered * scale[0] * scale[1]
        if dtype.is_integer:  # scaled in float64, then back to the integers, as the core scales integer tensors
            want = want.astype(dtype.as_numpy_dtype)
        checks.true(f"{label}: summed values keep their dtype", np.asarray(values).dtype == dtype.as_numpy_dtype)
        checks.close(f"{label}: summed values", values, want, 1e-6)


@pytest.mark.parametrize("mode", ["tf.function", "TF1 session"])
def test_alltoall_with_int32_splits_for_data_of_any_dtype_in_graphs(mode, checks):
    run = MODES[mode]
    for dtype, dim in itertools.product([tf.uint8, tf.int8, tf.float16, tf.float32, tf.int64], [1, 2]):
        def build():
            rows = np.repeat(np.arange(SIZE), RANK + 1)  # RANK + 1 rows for every rank, holding its number
            tensor = tf.constant(rows.reshape([-1] + [1] * (dim - 1)) * np.ones([1] + [2] * (dim - 1)), dtype)
            splits = tf.constant([RANK + 1] * SIZE, tf.int32)
            collected, received = hvd.alltoall(tensor, splits)
            return collected, received
        collected, received = run(build)
        checks.close(f"{mode} {dtype.name} {dim}d: rows", collected,
                     np.full([SIZE * (SIZE + 1) // 2] + [2] * (dim - 1), RANK))
        checks.close(f"{mode} {dtype.name} {dim}d: received splits", received, [r + 1 for r in range(SIZE)])
    empty = run(lambda: hvd.alltoall(tf.zeros([0, 3], tf.float32)))
    checks.true(f"{mode}: an empty alltoall gives no rows", np.asarray(empty).shape == (0, 3), np.asarray(empty).shape)


def test_tf1_gradients_of_equal_split_alltoall_and_reducescatter(checks):
    with tf.Graph().as_default():
        x = tf.constant(np.arange(2 * SIZE, dtype=np.float64).reshape(2 * SIZE, 1) * (RANK + 1))
        a2a_grad = tf.gradients(hvd.alltoall(x), x, tf.ones([2 * SIZE, 1], tf.float64) * (RANK + 1))[0]
        rs = {name: hvd.reducescatter(x, op=op) for name, op in (("Sum", hvd.Sum), ("Average", hvd.Average))}
        rs_grads = {name: tf.gradients(out, x, tf.ones([2, 1], tf.float64))[0] for name, out in rs.items()}
        group = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum)
        group_grads = tf.gradients(group, x, [tf.ones([2, 1], tf.float64)] * 2)[0]
        with session() as s:
            got_a2a, got_rs, got_group = s.run([a2a_grad, rs_grads, group_grads])
    # alltoall's gradient sends each block back: block j came from rank j, whose upstream gradient is j + 1.
    checks.close("alltoall grad", got_a2a, np.repeat(np.arange(1, SIZE + 1), 2).reshape(-1, 1).astype(np.float64))
    # Horovod: the gathered upstream gradients, times the size for a Sum, as they are for an Average.
    checks.close("reducescatter Sum grad", got_rs["Sum"], np.full((2 * SIZE, 1), float(SIZE)))
    checks.close("reducescatter Average grad", got_rs["Average"], np.ones((2 * SIZE, 1)))
    checks.close("grouped reducescatter Sum grad", got_group, np.full((2 * SIZE, 1), 3.0 * SIZE))


# --- elastic state, model parallelism -------------------------------------------------------------------------

def test_tensorflow_state_restores_what_sync_made(checks):
    variables = [tf.Variable(np.full(3, RANK + 1.0)), tf.Variable(np.arange(2) + 10 * RANK)]
    state = hvd.elastic.TensorFlowState(variables, batch=5 + RANK, epoch=RANK)
    state.sync()
    for v in variables:
        v.assign(v * 0 + 99)
    state.batch, state.epoch = 1000, 1000
    state.restore()
    checks.close("first variable: rank 0's", variables[0].numpy(), np.full(3, 1.0))
    checks.close("second variable: rank 0's", variables[1].numpy(), np.arange(2))
    checks.true("batch: rank 0's", state.batch == 5, state.batch)
    checks.true("epoch: rank 0's", state.epoch == 0, state.epoch)


def test_layers_reduced_over_different_process_sets_train_in_a_tf_function(checks):
    # A trunk every rank shares (averaged over the job) and a head shared only within the rank's group (even or
    # odd ranks): two DistributedGradientTapes, one per process set, in one tf.function step.
    groups = [[r for r in range(SIZE) if r % 2 == parity] for parity in (0, 1)]
    sets = [hvd.add_process_set(g) for g in groups]
    mine = sets[RANK % 2]
    try:
        keras.utils.set_random_seed(11)
        trunk = keras.layers.Dense(4, name="trunk", dtype="float64")
        head = keras.layers.Dense(1, name="head", dtype="float64")
        trunk.build((None, 3))
        head.build((None, 4))
        start = [v.numpy().copy() for v in trunk.trainable_weights + head.trainable_weights]
        data = [np.random.RandomState(400 + r).randn(6, 3) for r in range(SIZE)]
        optimizer = keras.optimizers.SGD(0.125)  # exact in the float32 learning rate

        @tf.function
        def step(x):
            with tf.GradientTape(persistent=True) as tape:
                loss = tf.reduce_sum(head(trunk(x)) ** 2)
            trunk_grads = hvd.DistributedGradientTape(tape).gradient(loss, trunk.trainable_weights)
            head_grads = hvd.DistributedGradientTape(tape, process_set=mine).gradient(loss, head.trainable_weights)
            optimizer.apply_gradients(zip(trunk_grads + head_grads, trunk.trainable_weights + head.trainable_weights))

        for _ in range(3):
            step(tf.constant(data[RANK]))
        got = [v.numpy() for v in trunk.trainable_weights + head.trainable_weights]
        want = model_parallel_reference(start, data, groups, steps=3, lr=0.125)[RANK % 2]
        for i, (g, w) in enumerate(zip(got, want)):
            checks.close(f"weight {i} after 3 steps", g, w, 1e-10, 1e-10)
    finally:
        for s in reversed(sets):
            hvd.remove_process_set(s)


def model_parallel_reference(start, data, groups, steps, lr):
    """Per group, the weights [trunk kernel, trunk bias, head kernel, head bias] after `steps` SGD steps, in float64
    NumPy: the trunk's gradient averaged over every rank, the head's over the group's (each group's head apart)."""
    def grads(w, x):
        h = x @ w[0] + w[1]
        out = h @ w[2] + w[3]
        d_out = 2 * out
        d_h = d_out @ w[2].T
        return [x.T @ d_h, d_h.sum(0), h.T @ d_out, d_out.sum(0)]
    heads = {g: [a.copy() for a in start[2:]] for g in range(2)}
    trunk = [a.copy() for a in start[:2]]
    for _ in range(steps):
        per_rank = {r: grads(trunk + heads[r % 2], data[r]) for r in range(len(data))}
        trunk_step = [np.mean([per_rank[r][i] for r in per_rank], 0) for i in range(2)]
        for g, members in enumerate(groups):
            if members:
                head_step = [np.mean([per_rank[r][i] for r in members], 0) for i in (2, 3)]
                heads[g] = [a - lr * s for a, s in zip(heads[g], head_step)]
        trunk = [a - lr * s for a, s in zip(trunk, trunk_step)]
    return {g: trunk + heads[g] for g in range(2)}

