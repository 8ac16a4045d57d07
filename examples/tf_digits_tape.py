"""TensorFlow 2 + hvdlite: scikit-learn's digits trained with a custom loop and DistributedGradientTape.

    hvdliterun -np 2 python examples/tf_digits_tape.py
    python examples/tf_digits_tape.py          # one process: the same script, size 1

The training step is a tf.function; inside it DistributedGradientTape averages all gradients of the step across
ranks in one grouped allreduce. Model and optimizer state start as rank 0's (broadcast_variables), each rank
reads its own shard of the training set, and the learning rate is scaled by the number of ranks.
"""
import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import hvdlite.tensorflow as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.002, help="learning rate of one rank (scaled by size)")
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
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(args.seed + rank)  # different on purpose: broadcast_variables aligns them

    x_train, x_val, y_train, y_val = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    model = build_model()
    optimizer = keras.optimizers.Adam(args.lr * size)
    optimizer.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.variables, root_rank=0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    # Every rank takes the same number of steps per epoch (the collectives of a step need all ranks).
    steps = len(x_train) // (args.batch_size * size)
    rng = np.random.RandomState(args.seed + 1000 * rank)
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_shard))
        losses = []
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            losses.append(float(train_step(tf.constant(x_shard[batch]), tf.constant(y_shard[batch]))))
        mean_loss = float(hvd.allreduce(tf.constant(np.mean(losses)), name="epoch_loss"))
        if rank == 0 and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1}: train loss {mean_loss:.4f}", flush=True)

    logits = model(x_val, training=False)
    accuracy = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_val))
    loss = float(loss_fn(y_val, logits))
    if rank == 0:
        print(f"ranks={size} val_accuracy={accuracy:.4f} val_loss={loss:.4f}", flush=True)
        if args.json:
            with open(args.json, "w") as stream:
                json.dump({"size": size, "val_accuracy": accuracy, "val_loss": loss, "epochs": args.epochs,
                           "batch_size_per_rank": args.batch_size}, stream)


if __name__ == "__main__":
    main()
