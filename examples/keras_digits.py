"""Keras 3 + hvdlite: a small classifier of scikit-learn's 8x8 digits trained with model.fit, data sharded by rank.

    hvdliterun -np 2 python examples/keras_digits.py
    python examples/keras_digits.py            # one process: the same script, size 1

Each rank trains on its shard of the training set with a DistributedOptimizer (gradients averaged across ranks
every step, so the global batch is size x --batch-size and the learning rate is scaled by size), starting from
rank 0's weights (BroadcastGlobalVariablesCallback), with the learning rate warmed up from lr to size x lr over
the first epochs (LearningRateWarmupCallback) and the epoch's metrics averaged over ranks (MetricAverageCallback).
The validation accuracy printed at the end is measured on the whole validation set.
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import hvdlite.tensorflow.keras as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.002, help="learning rate of one rank (scaled by size)")
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the result (size, validation accuracy, loss) to this file (rank 0)")
    return parser.parse_args()


def load_data(seed):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def build_model():
    return keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def train(epochs=30, batch_size=16, lr=0.002, warmup_epochs=3, seed=0):
    """Trains on this rank's shard; returns (size, validation accuracy, validation loss) on the whole set."""
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Different seeds per rank on purpose: the broadcast callback makes the starting weights rank 0's.
    keras.utils.set_random_seed(seed + rank)

    x_train, x_val, y_train, y_val = load_data(seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    scaled_lr = lr * size
    optimizer = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model = build_model()
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(scaled_lr, warmup_epochs=warmup_epochs, verbose=0),
    ]
    model.fit(x_shard, y_shard, batch_size=batch_size, epochs=epochs,
              validation_data=(x_val[rank::size], y_val[rank::size]), callbacks=callbacks,
              verbose=2 if rank == 0 else 0)

    loss, accuracy = model.evaluate(x_val, y_val, batch_size=256, verbose=0)
    return size, float(accuracy), float(loss)


def report(args, size, accuracy, loss):
    """Rank 0's line (and --json file)."""
    print(f"ranks={size} val_accuracy={accuracy:.4f} val_loss={loss:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"size": size, "val_accuracy": accuracy, "val_loss": loss, "epochs": args.epochs,
                       "batch_size_per_rank": args.batch_size}, stream)


def main():
    args = parse_args()
    size, accuracy, loss = train(args.epochs, args.batch_size, args.lr, args.warmup_epochs, args.seed)
    if hvd.rank() == 0:
        report(args, size, accuracy, loss)


if __name__ == "__main__":
    main()
