"""An elastic Keras 3 training (model.fit with Horovod's elastic callbacks) on scikit-learn's digits, run by
tests/test_elastic.py under hvdliterun. Each rank fits its shard of each epoch in a fixed order; a resumed epoch
fits the batches after ``state.batch``. On the job's first start, rank --kill-rank SIGKILLs itself after global
batch --kill-at. Rank 0 writes the final weights' bytes to --out."""
import argparse
import os
import signal

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import hvdlite.tensorflow.keras as hvd
from hvdlite.elastic.runner import restarts

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--commit-every", type=int, default=1)
parser.add_argument("--kill-at", type=int, default=-1)
parser.add_argument("--kill-rank", type=int, default=1)
args = parser.parse_args()
BATCH = 32

tf.config.experimental.enable_op_determinism()
hvd.init()
digits = load_digits()
x_all, y_all = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
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


@hvd.elastic.run
def train(state):
    with open(args.out + ".resumed", "a") as log:
        log.write(f"{restarts()} {hvd.rank()} {state.epoch} {state.batch}\n")
    while state.epoch < args.epochs:
        x, y = shard(state.epoch)
        start = state.batch * BATCH
        model.fit(x[start:], y[start:], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)


train(state)
if hvd.rank() == 0:
    with open(args.out, "wb") as stream:
        stream.write(b"".join(np.asarray(w).tobytes() for w in model.get_weights()))
