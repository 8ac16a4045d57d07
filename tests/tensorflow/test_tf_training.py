"""Worker (run under mpiexec -n 2 or 3): training with DistributedGradientTape and with the Keras
DistributedOptimizer under model.fit. Every rank checks that the weights end identical on all ranks and equal
to a single-process reference trained with plain TensorFlow/Keras on the global batch (each step's global
batch is the union of the ranks' local batches, so the averaged gradient is the global batch's gradient)."""
import os
import tempfile

import numpy as np

import pytest
import keras
import tensorflow as tf

import hvdlite.tensorflow as hvd
import hvdlite.tensorflow.keras as hvdk

tf.get_logger().setLevel("ERROR")
# 2 ranks only: the adapter hands any rank count to the same core, whose tests run 2, 3 and 4 ranks.
pytestmark = [pytest.mark.ranks(2), pytest.mark.hvd_env(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1, TF_CPP_MIN_LOG_LEVEL=2)]
RANK = SIZE = None  # set once hvdlite has started

checks = None  # the running test's Checks: the helpers below record into it


@pytest.fixture(autouse=True)
def record_into(request):
    global checks
    checks = request.getfixturevalue("checks")


@pytest.fixture(scope="module", autouse=True)
def started():
    global RANK, SIZE
    hvd.init()
    RANK, SIZE = hvd.rank(), hvd.size()

FEATURES, CLASSES, LOCAL_BATCH, STEPS = 6, 3, 4, 6


def dataset(seed=0):
    """The global data: STEPS global batches of LOCAL_BATCH * SIZE rows. Rank r's local batch t is rows
    [t*B*S + r*B, t*B*S + (r+1)*B); the reference sees the global batch t as one batch."""
    rng = np.random.RandomState(seed)
    x = rng.randn(STEPS * LOCAL_BATCH * SIZE, FEATURES).astype(np.float32)
    y = rng.randint(0, CLASSES, size=len(x)).astype(np.int64)
    return x, y


def local_rows(n_rows, batch=LOCAL_BATCH):
    """Indices of this rank's rows, in step order."""
    steps = n_rows // (batch * SIZE)
    return np.concatenate([np.arange(t * batch * SIZE + RANK * batch, t * batch * SIZE + (RANK + 1) * batch)
                           for t in range(steps)])


def gathered_equal(label, arrays):
    """The flattened arrays are bitwise identical on every rank."""
    flat = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    everyone = hvd.allgather_object(flat)
    checks.true(label, all(np.array_equal(everyone[0], other) for other in everyone),
                f"max diff {max(np.max(np.abs(everyone[0] - o)) for o in everyone)}")


# --- DistributedGradientTape ---------------------------------------------------------------------------------

def linear_init():
    rng = np.random.RandomState(42)
    return rng.randn(FEATURES, CLASSES).astype(np.float32) * 0.3, np.zeros(CLASSES, np.float32)


def loss_fn(w, b, x, y):
    logits = tf.matmul(x, w) + b
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))


def reference_linear(x, y, lr, steps=STEPS):
    w0, b0 = linear_init()
    w, b = tf.Variable(w0), tf.Variable(b0)
    rows = LOCAL_BATCH * SIZE
    for t in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn(w, b, x[t * rows:(t + 1) * rows], y[t * rows:(t + 1) * rows])
        for v, g in zip((w, b), tape.gradient(loss, [w, b])):
            v.assign_sub(lr * g)
    return w.numpy(), b.numpy()


def train_with_tape(mode, lr=0.5, **tape_kwargs):
    x, y = dataset(1)
    w0, b0 = linear_init()
    # Different starting points per rank: the broadcast below must make them equal.
    w = tf.Variable(w0 + RANK)
    b = tf.Variable(b0 - RANK)
    hvd.broadcast_variables([w, b], root_rank=0)
    mine = local_rows(len(x))
    xs, ys = x[mine], y[mine]

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(w, b, xb, yb)
        tape = hvd.DistributedGradientTape(tape, **tape_kwargs)
        grads = tape.gradient(loss, [w, b])
        for v, g in zip((w, b), grads):
            v.assign_sub(lr * g)
        return loss
    step = step if mode == "eager" else tf.function(step)
    for t in range(STEPS):
        rows = slice(t * LOCAL_BATCH, (t + 1) * LOCAL_BATCH)
        step(tf.constant(xs[rows]), tf.constant(ys[rows]))
    return (w.numpy(), b.numpy()), (x, y)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradient_tape(mode):
    (w, b), (x, y) = train_with_tape(mode)
    ref_w, ref_b = reference_linear(x, y, 0.5)
    gathered_equal(f"{mode} tape weights identical on all ranks", [w, b])
    checks.close(f"{mode} tape weights match reference", w, ref_w, rtol=1e-5, atol=1e-5)
    checks.close(f"{mode} tape bias matches reference", b, ref_b, rtol=1e-5, atol=1e-5)
    for label, kwargs, tol in (("predivide", dict(gradient_predivide_factor=2.0), 1e-5),
                               ("num_groups", dict(num_groups=2), 1e-5),
                               ("fp16", dict(compression=hvd.Compression.fp16), 2e-3)):
        (w2, b2), _ = train_with_tape(mode, **kwargs)
        gathered_equal(f"{mode} tape {label} identical on all ranks", [w2, b2])
        checks.close(f"{mode} tape {label} matches reference", w2, ref_w, rtol=tol, atol=tol)
    (w3, _), _ = train_with_tape(mode, lr=0.5 / SIZE, op=hvd.Sum)
    checks.close(f"{mode} tape op=Sum matches reference", w3, ref_w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_sparse_tape(mode):
    """Embedding gradients are tf.IndexedSlices: allgathered by default, densified with sparse_as_dense."""
    vocab, dim = 10, 3
    rng = np.random.RandomState(5)
    table0 = rng.randn(vocab, dim).astype(np.float32)
    ids = rng.randint(0, vocab, size=(STEPS, SIZE, 5))
    targets = rng.randn(STEPS, SIZE, 5, dim).astype(np.float32)

    def loss_of(table, i, target):
        return tf.reduce_mean(tf.square(tf.gather(table, i) - target))

    ref = tf.Variable(table0)
    for t in range(STEPS):
        with tf.GradientTape() as tape:
            loss = tf.add_n([loss_of(ref, ids[t, r], targets[t, r]) for r in range(SIZE)]) / SIZE
        ref.assign_sub(0.3 * tf.convert_to_tensor(tape.gradient(loss, ref)))

    for sparse_as_dense in (False, True):
        table = tf.Variable(table0)
        seen = []

        def step(i, target):
            with tf.GradientTape() as tape:
                loss = loss_of(table, i, target)
            grad = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(loss, [table])[0]
            seen.append(type(grad).__name__)
            table.assign_sub(0.3 * tf.convert_to_tensor(grad))
        step = step if mode == "eager" else tf.function(step)
        for t in range(STEPS):
            step(tf.constant(ids[t, RANK]), tf.constant(targets[t, RANK]))
        label = f"{mode} sparse tape sparse_as_dense={sparse_as_dense}"
        checks.true(label + " gradient type", seen[0] == ("Tensor" if sparse_as_dense else "IndexedSlices")
                    or (sparse_as_dense and seen[0] in ("EagerTensor", "SymbolicTensor")), str(seen[:1]))
        gathered_equal(label + " identical on all ranks", [table.numpy()])
        checks.close(label + " matches reference", table.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_tape_mismatch_raises():
    """Ranks whose models differ: every rank gets an error naming the gradient."""
    w = tf.Variable(tf.ones((3 + RANK, 2)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * w)
    tape = hvd.DistributedGradientTape(tape)
    checks.raises("tape mismatched models raise on every rank", (hvd.HorovodInternalError,), lambda: tape.gradient(loss, [w]), match=("DistributedGradientTape",))


# --- Keras DistributedOptimizer under model.fit --------------------------------------------------------------

def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(CLASSES)])


def loss_object():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def root_initial_weights(model):
    return hvd.broadcast_object(model.get_weights(), root_rank=0)


def reference_fit(optimizer, initial, x, y, batch, epochs):
    model = make_model(0)
    model.set_weights(initial)
    model.compile(optimizer=optimizer, loss=loss_object())
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return model.get_weights(), model.optimizer


OPTIMIZERS = {
    "SGD": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "Adam": lambda: keras.optimizers.Adam(0.01),
    "AdamW": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.05),
}


@pytest.mark.parametrize("name, run_eagerly", [(name, False) for name in OPTIMIZERS] + [("SGD", True)])
def test_keras_fit(name, run_eagerly):
    x, y = dataset(2)
    model = make_model(100 + RANK)  # different initialisation on every rank
    initial = root_initial_weights(model)
    model.compile(optimizer=hvdk.DistributedOptimizer(OPTIMIZERS[name]()), loss=loss_object(),
                  run_eagerly=run_eagerly)
    mine = local_rows(len(x))
    model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0)])
    label = f"fit {name}{' eager' if run_eagerly else ''}"
    gathered_equal(f"{label} weights identical on all ranks", model.get_weights())
    gathered_equal(f"{label} optimizer state identical on all ranks", [v.numpy() for v in model.optimizer.variables])
    ref_weights, _ = reference_fit(OPTIMIZERS[name](), initial, x, y, LOCAL_BATCH * SIZE, 2)
    for i, (got, ref) in enumerate(zip(model.get_weights(), ref_weights)):
        checks.close(f"{label} weight {i} matches single-process reference", got, ref, rtol=2e-4, atol=2e-4)
    return model


@pytest.mark.parametrize("average", [False, True])
def test_backward_passes_per_step(average):
    x, y = dataset(3)
    model = make_model(7)
    initial = root_initial_weights(model)
    model.set_weights(initial)
    lr = 0.2
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=2,
                                    average_aggregated_gradients=average)
    model.compile(optimizer=opt, loss=loss_object())
    mine = local_rows(len(x))
    model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0)
    label = f"backward_passes_per_step=2 average={average}"
    gathered_equal(f"{label} identical on all ranks", model.get_weights())
    checks.true(f"{label} iterations count backward passes", int(opt.iterations.numpy()) == STEPS,
                str(int(opt.iterations.numpy())))
    # Two global batches accumulated = one batch twice as large; summed (not averaged) doubles the step.
    ref_weights, _ = reference_fit(keras.optimizers.SGD(lr if average else 2 * lr), initial, x, y,
                                   2 * LOCAL_BATCH * SIZE, 1)
    for i, (got, ref) in enumerate(zip(model.get_weights(), ref_weights)):
        checks.close(f"{label} weight {i} matches reference", got, ref, rtol=1e-5, atol=1e-5)


class RecordLogs(keras.callbacks.Callback):
    """Keeps a copy of the epoch logs as this rank computed them (placed before MetricAverageCallback)."""

    def __init__(self):
        super().__init__()
        self.raw = []

    def on_epoch_end(self, epoch, logs=None):
        self.raw.append(dict(logs))


class RecordLearningRate(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates, self.velocity_norms = [], []

    def on_train_batch_begin(self, batch, logs=None):
        optimizer = self.model.optimizer
        self.rates.append(float(optimizer.learning_rate.numpy()))
        self.velocity_norms.append(float(sum(np.sum(np.abs(m.numpy())) for m in getattr(optimizer, "momentums", []))))

    def on_epoch_end(self, epoch, logs=None):
        self.velocity_norms.append(float(sum(np.sum(np.abs(m.numpy())) for m in self.model.optimizer.momentums)))


def test_callbacks():
    x, y = dataset(4)
    mine = local_rows(len(x))
    model = make_model(200 + RANK)
    base_lr = 0.05
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(base_lr, momentum=0.5)),
                  loss=loss_object(), metrics=["accuracy"])
    raw, lr_record = RecordLogs(), RecordLearningRate()
    warmup_epochs = 2
    history = model.fit(
        x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=3, shuffle=False, verbose=0,
        validation_data=(x[mine][:8], y[mine][:8]),
        callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0), raw, hvdk.callbacks.MetricAverageCallback(),
                   hvdk.callbacks.LearningRateWarmupCallback(base_lr, warmup_epochs=warmup_epochs), lr_record])
    everyone_raw = hvd.allgather_object(raw.raw)
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        expected = [np.mean([everyone_raw[r][e][key] for r in range(SIZE)]) for e in range(3)]
        checks.close(f"MetricAverageCallback {key} is the mean over ranks", history.history[key], expected,
                     rtol=1e-6, atol=1e-7)
    gathered_equal("MetricAverageCallback logs identical on all ranks",
                   [history.history[k] for k in ("loss", "accuracy", "val_loss", "val_accuracy")])
    # Warmup: lr = base/size * (epoch' * (size-1)/warmup + 1), epoch' = epoch + (batch+1)/steps, then unchanged.
    expected = [base_lr / SIZE * ((e + (b + 1) / STEPS) * (SIZE - 1) / warmup_epochs + 1)
                for e in range(warmup_epochs) for b in range(STEPS)] + [expected_last(base_lr, warmup_epochs)] * STEPS
    checks.close("LearningRateWarmupCallback schedule", lr_record.rates, expected, rtol=1e-6)
    gathered_equal("warmup: weights identical on all ranks", model.get_weights())

    # Staircase schedule with momentum correction: at epoch 1 the rate halves and the velocities with it.
    model = make_model(300)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss=loss_object())
    record = RecordLearningRate()
    model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=3, shuffle=False, verbose=0,
              callbacks=[hvdk.callbacks.LearningRateScheduleCallback(0.1, lambda epoch: 0.5 ** epoch, start_epoch=1,
                                                                     end_epoch=2), record])
    rates = record.rates
    checks.close("LearningRateScheduleCallback staircase", [rates[0], rates[STEPS], rates[2 * STEPS]],
                 [0.1, 0.05, 0.05], rtol=1e-6)
    checks.close("LearningRateScheduleCallback constant within an epoch", rates[STEPS:2 * STEPS], [0.05] * STEPS,
                 rtol=1e-6)
    # velocity_norms: STEPS batch-begin values then the epoch-end value, per epoch.
    end_of_epoch0 = record.velocity_norms[STEPS]
    start_of_epoch1 = record.velocity_norms[STEPS + 1]
    checks.close("momentum correction scales the velocities by new_lr/old_lr", start_of_epoch1, 0.5 * end_of_epoch0,
                 rtol=1e-5)


def expected_last(base_lr, warmup_epochs):
    return base_lr / SIZE * (warmup_epochs * (SIZE - 1) / warmup_epochs + 1)


def test_load_model():
    x, y = dataset(5)
    mine = local_rows(len(x))
    model = make_model(400)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss=loss_object())
    model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0)])
    directory = hvd.broadcast_object(tempfile.mkdtemp(prefix="hvdlite_tf_") if RANK == 0 else None, 0)
    path = os.path.join(directory, "model.keras")
    if RANK == 0:
        model.save(path)
    hvd.barrier()
    loaded = hvdk.load_model(path)
    opt = loaded.optimizer
    checks.true("load_model wraps the optimizer", type(opt).__name__ == "Adam" and isinstance(
        opt, keras.optimizers.Adam) and hasattr(opt, "_hvdlite_settings"), repr(type(opt).__mro__[:3]))
    checks.true("load_model keeps optimizer iterations", int(opt.iterations.numpy()) == STEPS,
                str(int(opt.iterations.numpy())))
    for i, (a, b) in enumerate(zip(opt.variables, model.optimizer.variables)):
        checks.close(f"load_model keeps optimizer variable {i}", a.numpy(), b.numpy())
    plain = keras.models.load_model(path)
    checks.true("plain keras loads a model saved with DistributedOptimizer",
                type(plain.optimizer) is keras.optimizers.Adam, repr(type(plain.optimizer)))
    loaded.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0)
    model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0)
    gathered_equal("load_model: training continues identically on all ranks", loaded.get_weights())
    for i, (a, b) in enumerate(zip(loaded.get_weights(), model.get_weights())):
        checks.close(f"load_model: continued training equals the original's {i}", a, b, rtol=1e-6, atol=1e-6)


def test_sparse_keras():
    """An Embedding model under model.fit: IndexedSlices gradients through the optimizer."""
    rng = np.random.RandomState(6)
    ids = rng.randint(0, 12, size=(STEPS * LOCAL_BATCH * SIZE, 4))
    y = rng.randint(0, 2, size=len(ids))
    mine = local_rows(len(ids))

    def build():
        keras.utils.set_random_seed(11)
        return keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(12, 3),
                                 keras.layers.Flatten(), keras.layers.Dense(2)])
    for sparse_as_dense in (False, True):
        model = build()
        model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.5), sparse_as_dense=sparse_as_dense),
                      loss=loss_object())
        model.fit(ids[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0)
        ref = build()
        ref.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss_object())
        ref.fit(ids, y, batch_size=LOCAL_BATCH * SIZE, epochs=1, shuffle=False, verbose=0)
        label = f"Embedding fit sparse_as_dense={sparse_as_dense}"
        gathered_equal(label + " identical on all ranks", model.get_weights())
        for i, (a, b) in enumerate(zip(model.get_weights(), ref.get_weights())):
            checks.close(f"{label} weight {i} matches reference", a, b, rtol=1e-5, atol=1e-5)


def test_mixed_precision():
    """mixed_float16 with DistributedOptimizer(LossScaleOptimizer(...)): scaled gradients are averaged before the
    finite check, so every rank applies (or skips) the same steps."""
    x, y = dataset(7)
    mine = local_rows(len(x))
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = make_model(500)
        opt = hvdk.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
        model.compile(optimizer=opt, loss=loss_object())
        model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0)])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    checks.true("mixed precision keeps the LossScaleOptimizer outermost", model.optimizer is opt)
    gathered_equal("mixed precision: weights identical on all ranks", model.get_weights())
    gathered_equal("mixed precision: loss scale identical on all ranks", [v.numpy() for v in opt.variables])


def test_xla_refused():
    model = make_model(8)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss=loss_object(),
                  jit_compile=True)
    x, y = dataset(2)
    if not model.jit_compile:  # Keras turned XLA off by itself: nothing to refuse.
        return
    checks.raises("jit_compile=True is refused with a clear message", (RuntimeError,), lambda: model.fit(x[:8], y[:8], batch_size=4, verbose=0), match=("jit_compile=False",))
