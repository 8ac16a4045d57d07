"""Horovod's TensorFlow and Keras API beyond the collectives' eager and tf.function paths, checked on every rank
against values computed here independently: TF1 graphs run by a tf.compat.v1 session (collectives, gradients by
tf.gradients, errors, program order), the in-place and global-variable broadcasts, the query ops of a process set,
SyncBatchNormalization, the partial (local-layer) tape and optimizer, the broadcast callback's local variables,
and the Keras functions' tensor results.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import hvdlite.tensorflow as hvd
import hvdlite.tensorflow.keras as hvd_keras
from harness.reference import reduce_reference

tf.get_logger().setLevel("ERROR")
pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1, TF_CPP_MIN_LOG_LEVEL=2,
                                  HVDLITE_STALL_CHECK_TIME_SECONDS=10, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)]
RANK = SIZE = None


@pytest.fixture(scope="module", autouse=True)
def started():
    global RANK, SIZE
    hvd.init()
    RANK, SIZE = hvd.rank(), hvd.size()


def values(rank, shape, dtype, seed):
    """Rank ``rank``'s input: integers small enough for sums over 3 ranks in every dtype, exact in float16."""
    rng = np.random.RandomState(seed * 31 + rank)
    return rng.randint(0 if dtype.is_unsigned else -20, 20, size=shape).astype(dtype.as_numpy_dtype)


def session(**config):
    return tf.compat.v1.Session(config=tf.compat.v1.ConfigProto(**config))


def test_tf1_graph_collectives_gradients_and_variables(checks):
    dtypes = [tf.uint8, tf.uint16, tf.int32, tf.int64, tf.float16, tf.float32, tf.float64]
    with tf.Graph().as_default():
        fetches = {}
        for i, dtype in enumerate(dtypes):
            x = tf.constant(values(RANK, (3, 4), dtype, i))
            fetches[f"allreduce {dtype.name}"] = hvd.allreduce(x, op=hvd.Sum)
            fetches[f"allgather {dtype.name}"] = hvd.allgather(x)
            fetches[f"broadcast {dtype.name}"] = hvd.broadcast(x, SIZE - 1)
        grouped = hvd.grouped_allreduce([tf.constant(values(RANK, (5,), tf.float32, 50)),
                                         tf.constant(values(RANK, (2, 2), tf.float64, 51))], op=hvd.Average)
        scattered = hvd.reducescatter(tf.constant(values(RANK, (SIZE * 2, 3), tf.float32, 52)), op=hvd.Sum)
        # Gradients by tf.gradients, Horovod's conventions: allreduce's sums over ranks, allgather's and broadcast's
        # average (broadcast's kept on the root).
        w = tf.constant(values(RANK, (3, 4), tf.float64, 60))
        g_in = tf.constant(values(RANK, (3, 4), tf.float64, 61))
        grad_allreduce = tf.gradients(tf.reduce_sum(hvd.allreduce(g_in, op=hvd.Average) * w), g_in)[0]
        grad_allgather = tf.gradients(hvd.allgather(g_in), g_in, tf.ones((3 * SIZE, 4), tf.float64) * (1 + RANK))[0]
        grad_broadcast = tf.gradients(hvd.broadcast(g_in, 0), g_in, tf.ones((3, 4), tf.float64))[0]
        variable = tf.compat.v1.Variable(values(RANK, (4,), tf.float32, 70))
        assign_all = hvd.broadcast_global_variables(SIZE - 1)
        in_place = hvd.broadcast_([tf.compat.v1.Variable(values(RANK, (2,), tf.int32, 71))], 0)[0]
        with session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            got = s.run(fetches)
            got_grouped, got_scattered = s.run([grouped, scattered])
            grads = s.run([grad_allreduce, grad_allgather, grad_broadcast])
            s.run(assign_all)
            got_variable = s.run(variable)
            got_in_place = s.run(in_place)
    for i, dtype in enumerate(dtypes):
        inputs = [values(r, (3, 4), dtype, i) for r in range(SIZE)]
        checks.close(f"graph allreduce {dtype.name}", got[f"allreduce {dtype.name}"], reduce_reference(inputs, "Sum"))
        checks.close(f"graph allgather {dtype.name}", got[f"allgather {dtype.name}"], np.concatenate(inputs))
        checks.close(f"graph broadcast {dtype.name}", got[f"broadcast {dtype.name}"], inputs[SIZE - 1])
    checks.close("graph grouped allreduce 0", got_grouped[0],
                 reduce_reference([values(r, (5,), tf.float32, 50) for r in range(SIZE)], "Average"), 1e-6, 1e-6)
    checks.close("graph grouped allreduce 1", got_grouped[1],
                 reduce_reference([values(r, (2, 2), tf.float64, 51) for r in range(SIZE)], "Average"), 1e-12)
    summed = reduce_reference([values(r, (SIZE * 2, 3), tf.float32, 52) for r in range(SIZE)], "Sum")
    checks.close("graph reducescatter", got_scattered, summed[2 * RANK:2 * RANK + 2])
    all_w = [values(r, (3, 4), tf.float64, 60) for r in range(SIZE)]
    checks.close("graph grad allreduce", grads[0], np.sum(all_w, axis=0) / SIZE, 1e-12)
    checks.close("graph grad allgather", grads[1], np.full((3, 4), sum(1 + r for r in range(SIZE)) / SIZE), 1e-12)
    checks.close("graph grad broadcast", grads[2], np.full((3, 4), 1 if RANK == 0 else 0), 1e-12)
    checks.close("broadcast_global_variables", got_variable, values(SIZE - 1, (4,), tf.float32, 70))
    checks.close("graph broadcast_", got_in_place, values(0, (2,), tf.int32, 71))


def test_tf1_graph_runs_collectives_in_program_order_and_raises_on_every_rank(checks):
    count = 24
    with tf.Graph().as_default():
        outputs = [hvd.allreduce(tf.constant([float(i + RANK)]), op=hvd.Sum) for i in range(count)]
        # Ranks fetch them in different orders, with one inter-op thread: program order must still hold.
        fetch = outputs if RANK % 2 == 0 else outputs[::-1]
        mismatched = hvd.allreduce(tf.ones([2 + RANK]), name="graph.mismatched")
        with session(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1) as s:
            got = s.run(fetch)
            if RANK % 2:
                got = got[::-1]
            checks.close("independent graph allreduces", np.concatenate(got),
                         [SIZE * i + SIZE * (SIZE - 1) / 2 for i in range(count)])
            checks.raises("mismatched shapes in a graph", tf.errors.OpError, s.run, mismatched,
                          match=["graph.mismatched", "rank 0 sent [2]", "rank 1 sent [3]"])
            checks.close("the graph runs again after the error", s.run(outputs[0]), [SIZE * (SIZE - 1) / 2])


def test_eager_in_place_broadcast_and_query_ops_of_a_process_set(checks):
    variables = [tf.Variable(values(RANK, (3,), tf.float32, 80)), tf.Variable(values(RANK, (2,), tf.int64, 81))]
    result = hvd.broadcast_(variables, SIZE - 1)
    for i, (v, r, shape, dtype) in enumerate(zip(variables, result, [(3,), (2,)], [tf.float32, tf.int64])):
        want = values(SIZE - 1, shape, dtype, 80 + i)
        checks.close(f"broadcast_ variable {i}", v.numpy(), want)
        checks.close(f"broadcast_ returns value {i}", tf.convert_to_tensor(r).numpy(), want)
    checks.raises("broadcast_global_variables is for graphs", RuntimeError, hvd.broadcast_global_variables, 0,
                  match=["eager"])
    ps = hvd.add_process_set([SIZE - 1])
    try:
        checks.true("size_op by process set id", int(hvd.size_op(process_set_id=ps.process_set_id)) == 1)
        checks.true("process_set_included_op by id",
                    int(hvd.process_set_included_op(process_set_id=ps.process_set_id)) == int(RANK == SIZE - 1))
    finally:
        hvd.remove_process_set(ps)
    checks.raises("an id not added", ValueError, hvd.size_op, process_set_id=12345, match=["12345"])
    for query in (hvd.ccl_built, hvd.ddl_built, hvd.gloo_built, hvd.nccl_built):
        checks.true(f"{query.__name__}() is False", query() is False)


def test_keras_functions_return_tensors(checks):
    inputs = [values(r, (4,), tf.float32, 90) for r in range(SIZE)]
    for name, got, want in [
            ("allreduce", hvd_keras.allreduce(inputs[RANK], op=hvd.Sum), reduce_reference(inputs, "Sum")),
            ("allgather", hvd_keras.allgather(inputs[RANK]), np.concatenate(inputs)),
            ("broadcast", hvd_keras.broadcast(inputs[RANK], 0), inputs[0])]:
        checks.true(f"keras {name} returns a tensor", isinstance(got, tf.Tensor), type(got).__name__)
        checks.close(f"keras {name}", got.numpy(), want)


def test_sync_batch_normalization_uses_the_global_batch(checks):
    checks.raises("fused=True is refused", ValueError, hvd.SyncBatchNormalization, fused=True, match=["fused"])
    rows = [3, 5, 4][:SIZE]  # ranks hold batches of different sizes
    batches = [np.random.RandomState(100 + r).randn(rows[r], 6).astype(np.float64) * (r + 1) + r for r in range(SIZE)]
    weights = [np.random.RandomState(200 + r).randn(rows[r], 6) for r in range(SIZE)]
    layer = hvd.SyncBatchNormalization(fused=False, momentum=0.5, epsilon=1e-3, dtype="float64")
    x = tf.constant(batches[RANK])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * weights[RANK])
    grad_x, grad_gamma = tape.gradient(loss, [x, layer.gamma])
    # Reference: plain Keras batch normalization of the whole batch in float64, with every rank's loss summed.
    full = tf.constant(np.concatenate(batches))
    plain = keras.layers.BatchNormalization(momentum=0.5, epsilon=1e-3, dtype="float64")
    with tf.GradientTape() as tape:
        tape.watch(full)
        y_full = plain(full, training=True)
        loss_full = tf.reduce_sum(y_full * np.concatenate(weights))
    full_grad_x, full_grad_gamma = tape.gradient(loss_full, [full, plain.gamma])
    start = sum(rows[:RANK])
    checks.close("normalized like the global batch", y.numpy(), y_full.numpy()[start:start + rows[RANK]], 1e-9, 1e-9)
    checks.close("moving mean", layer.moving_mean.numpy(), plain.moving_mean.numpy(), 1e-9, 1e-9)
    checks.close("moving variance", layer.moving_variance.numpy(), plain.moving_variance.numpy(), 1e-9, 1e-9)
    checks.close("input gradient", grad_x.numpy(), full_grad_x.numpy()[start:start + rows[RANK]], 1e-8, 1e-8)
    # gamma's gradient on each rank covers its own rows; summed over ranks it is the global batch's.
    checks.close("gamma gradient summed over ranks", hvd.allreduce(grad_gamma, op=hvd.Sum).numpy(),
                 full_grad_gamma.numpy(), 1e-8, 1e-8)


def two_layer_model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="shared"),
                              keras.layers.Dense(2, name="local")])
    return model


def test_partial_distributed_tape_and_optimizer_keep_local_layers_local(checks):
    x = tf.constant(np.random.RandomState(300 + RANK).randn(5, 3).astype(np.float32))
    model = two_layer_model(7)
    local = model.get_layer("local")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x) ** 2)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=local)
    grads = tape.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as plain_tape:
        plain_loss = tf.reduce_sum(model(x) ** 2)
    plain = plain_tape.gradient(plain_loss, model.trainable_variables)
    local_ids = {id(v) for v in local.trainable_weights}
    for v, g, p in zip(model.trainable_variables, grads, plain):
        if id(v) in local_ids:
            checks.close(f"local {v.path}: own gradient / size", g.numpy(), p.numpy() / SIZE, 1e-6, 1e-6)
        else:
            mean = hvd.allreduce(p, op=hvd.Average).numpy()
            checks.close(f"shared {v.path}: averaged", g.numpy(), mean, 1e-6, 1e-6)

    optimizer = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local])
    optimizer.apply_gradients(zip(plain, model.trainable_variables))
    for v in model.trainable_variables:
        gathered = hvd.allgather(tf.expand_dims(tf.convert_to_tensor(v), 0)).numpy()
        same = all(np.allclose(gathered[0], g, atol=1e-6) for g in gathered)
        checks.true(f"{v.path} {'differs' if id(v) in local_ids else 'agrees'} across ranks",
                    same != (id(v) in local_ids))


def test_broadcast_callback_leaves_local_variables_alone(checks):
    model = two_layer_model(11 + RANK)  # different initial weights on every rank
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    local = model.get_layer("local").kernel
    mine = local.numpy().copy()
    callback = hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])
    model.fit(np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32), epochs=1, verbose=0, callbacks=[callback])
    root = two_layer_model(11)
    checks.close("shared kernel from the root", model.get_layer("shared").kernel.numpy(),
                 root.get_layer("shared").kernel.numpy())
    checks.close("local kernel kept", local.numpy(), mine)
