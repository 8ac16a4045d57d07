"""An elastic Keras 3 training on scikit-learn's digits, run by tests/test_elastic.py under hvdliterun: model.fit
with Horovod's elastic callbacks and KerasState, or (--custom-loop) a tf.function step with
DistributedGradientTape and TensorFlowState. Each rank trains on its shard of each epoch in a fixed order; a
resumed epoch goes on after ``state.batch``. On the job's first start, rank --kill-rank SIGKILLs itself after
batch --kill-at (epoch * 1000 + batch). Rank 0 writes the final weights' bytes to --out."""
import os
import signal

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import hvdlite.tensorflow.keras as hvd
from hvdlite.elastic.resume import restarts

import worker_arguments  # beside this script

parser = worker_arguments.parser()
parser.add_argument("--custom-loop", action="store_true")
args = parser.parse_args()
BATCH = 32

tf.config.experimental.enable_op_determinism()
hvd.init()
digits = load_digits()
x_all, y_all = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
if args.custom_loop:
    import hvdlite.tensorflow as hvd_tf
    optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    optimizer.build(model.trainable_variables)
    state = hvd_tf.elastic.TensorFlowState(model.variables + optimizer.variables, batch=0, epoch=0)
else:
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss=loss_fn)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
done = {"batches": 0}


class KillOnce(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if restarts() == 0 and hvd.rank() == args.kill_rank and \
                state.epoch * 1000 + state.batch == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=args.commit_every),
             hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state), KillOnce()]


def shard(epoch):
    order = np.random.RandomState(epoch).permutation(len(y_all))
    mine = order[hvd.rank()::hvd.size()][:len(y_all) // hvd.size() // BATCH * BATCH]  # whole batches only
    return x_all[mine], y_all[mine]


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    tape = hvd_tf.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


def custom_loop_epoch(x, y):
    """The epoch's batches after state.batch, a commit after each (the kill as in model.fit's callbacks)."""
    while state.batch * BATCH < len(y):
        start = state.batch * BATCH
        step(x[start:start + BATCH], y[start:start + BATCH])
        state.batch += 1
        state.commit()
        KillOnce().on_train_batch_end(state.batch)
    state.epoch += 1
    state.batch = 0
    state.commit()


@hvd.elastic.run
def train(state):
    with open(args.out + ".resumed", "a") as log:
        log.write(f"{restarts()} {hvd.rank()} {state.epoch} {state.batch}\n")
    while state.epoch < args.epochs:
        x, y = shard(state.epoch)
        if args.custom_loop:
            custom_loop_epoch(x, y)
            continue
        start = state.batch * BATCH
        model.fit(x[start:], y[start:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)


train(state)
if hvd.rank() == 0:
    with open(args.out, "wb") as stream:
        stream.write(b"".join(np.asarray(w).tobytes() for w in model.get_weights()))
