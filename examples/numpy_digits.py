"""Data-parallel training in plain numpy: a one-hidden-layer MLP on scikit-learn's 8x8 digits.

Each rank trains on its own shard; gradients are averaged across ranks with hvdlite.grouped_allreduce, and the
initial weights come from rank 0 by broadcast, so every rank holds the same model at every step.

    hvdliterun -np 2 python examples/numpy_digits.py [--epochs 10]
"""
import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hvdlite as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1, help="per rank; scaled by the number of ranks")
    parser.add_argument("--hidden", type=int, default=64)
    return parser.parse_args()


def load_shards(rank, size):
    """The same split on every rank (fixed seed); each rank keeps every size-th example from its rank on."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train[rank::size], y_train[rank::size]), (x_test[rank::size], y_test[rank::size]), len(x_train)


def initial_parameters(n_in, n_hidden, n_out, seed):
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((n_in, n_hidden)) * np.sqrt(2.0 / n_in)).astype(np.float32),
        "b1": np.zeros(n_hidden, np.float32),
        "w2": (rng.standard_normal((n_hidden, n_out)) * np.sqrt(1.0 / n_hidden)).astype(np.float32),
        "b2": np.zeros(n_out, np.float32),
    }


def forward(params, x):
    hidden = np.maximum(x @ params["w1"] + params["b1"], 0.0)
    logits = hidden @ params["w2"] + params["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return hidden, probs


def loss_and_gradients(params, x, y):
    """Mean cross-entropy over the batch and its gradients (backpropagation by hand)."""
    hidden, probs = forward(params, x)
    n = len(x)
    loss = -np.log(probs[np.arange(n), y] + 1e-12).mean()
    d_logits = probs
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    d_hidden = (d_logits @ params["w2"].T) * (hidden > 0)
    grads = {"w1": x.T @ d_hidden, "b1": d_hidden.sum(axis=0), "w2": hidden.T @ d_logits, "b2": d_logits.sum(axis=0)}
    return float(loss), grads


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    (x_train, y_train), (x_test, y_test), n_train_total = load_shards(rank, size)

    # Every rank starts from rank 0's weights (the others' own seeds would differ).
    params = initial_parameters(x_train.shape[1], args.hidden, 10, seed=1234 + rank)
    params = {name: hvd.broadcast(value, root_rank=0, name=f"init.{name}") for name, value in params.items()}
    names = sorted(params)

    # Equal step counts on every rank (shards differ by at most one example), else the allreduces would not pair.
    steps_per_epoch = max(1, (n_train_total // size) // args.batch_size)
    lr = args.lr * size  # the global batch is size times larger
    rng = np.random.default_rng(rank)
    if rank == 0:
        print(f"{size} ranks, {n_train_total} training examples, {steps_per_epoch} steps per epoch", flush=True)

    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            loss, grads = loss_and_gradients(params, x_train[batch], y_train[batch])
            loss_sum += loss
            averaged = hvd.grouped_allreduce([grads[n] for n in names], name="grads", op=hvd.Average)
            for name, grad in zip(names, averaged):
                params[name] -= lr * grad
        train_loss = hvd.allreduce(np.array([loss_sum / steps_per_epoch]), name="train_loss", op=hvd.Average)[0]
        correct = int((forward(params, x_test)[1].argmax(axis=1) == y_test).sum())
        totals = hvd.allreduce(np.array([correct, len(y_test)], np.int64), name="test_counts", op=hvd.Sum)
        if rank == 0:
            print(f"epoch {epoch:2d}  loss {train_loss:.4f}  test accuracy {totals[0] / totals[1]:.4f}", flush=True)

    # Data parallelism keeps the replicas identical: check it against rank 0's copy.
    for name in names:
        assert np.array_equal(params[name], hvd.broadcast(params[name], root_rank=0, name=f"check.{name}")), name
    hvd.shutdown()


if __name__ == "__main__":
    main()
