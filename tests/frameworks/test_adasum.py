"""Adasum through PyTorch and TensorFlow on 2 and 4 ranks, checked on every rank against a float64 reference of
the same formula combined in the same pairs (harness.reference.adasum_reference), and training with PyTorch's and
Keras' DistributedOptimizer(op=Adasum) on the digits data set converges, every rank ending with the same weights.
(The core's Adasum through the NumPy API: test_core_adasum.py.)
"""
import numpy as np
import pytest

import hvdlite as hvd
from harness.reference import adasum_inputs, adasum_reference

pytestmark = [pytest.mark.ranks(2, 4),
              pytest.mark.hvd_env(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1, TF_CPP_MIN_LOG_LEVEL=2)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


def test_torch_and_tensorflow_tensors(checks):
    import tensorflow as tf
    import torch
    import hvdlite.tensorflow as hvd_tf
    import hvdlite.torch as hvd_torch
    rank = hvd.rank()
    xs = adasum_inputs(hvd.size(), 1200, (4, 6), np.float32)
    expected = adasum_reference(xs)
    got = hvd_torch.allreduce(torch.from_numpy(xs[rank]), op=hvd_torch.Adasum)
    checks.close("torch allreduce Adasum", got, expected, 2e-5, 2e-5)
    t = torch.from_numpy(xs[rank].copy())
    hvd_torch.allreduce_(t, op=hvd_torch.Adasum)
    checks.close("torch allreduce_ Adasum", t, expected, 2e-5, 2e-5)
    got = hvd_tf.allreduce(tf.constant(xs[rank]), op=hvd_tf.Adasum)
    checks.close("tensorflow allreduce Adasum", got.numpy(), expected, 2e-5, 2e-5)
    got = tf.function(lambda x: hvd_tf.allreduce(x, op=hvd_tf.Adasum))(tf.constant(xs[rank]))
    checks.close("tensorflow allreduce Adasum in tf.function", got.numpy(), expected, 2e-5, 2e-5)


def digits_shard(rank, size):
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    test, train = order[:300], order[300:]
    mine = train[rank::size]
    return x[mine], y[mine], x[test], y[test]


def test_torch_training_with_adasum_converges(checks):
    import torch
    import hvdlite.torch as hvd_torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y, x_test, y_test = (torch.from_numpy(a) for a in digits_shard(hvd.rank(), hvd.size()))
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    hvd_torch.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd_torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                               named_parameters=model.named_parameters(), op=hvd_torch.Adasum)
    loss_fn = torch.nn.CrossEntropyLoss()
    first = None
    for epoch in range(8):
        for start in range(0, len(y) - 31, 32):
            optimizer.zero_grad()
            loss = loss_fn(model(x[start:start + 32]), y[start:start + 32])
            loss.backward()
            optimizer.step()
            first = float(loss) if first is None else first
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
        final = float(loss_fn(model(x), y))
    checks.true("the loss falls", final < first / 4, f"first batch {first:.3f}, final {final:.3f}")
    checks.true("test accuracy above 90%", accuracy > 0.9, f"{accuracy:.3f}")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd_torch.allgather(flat.unsqueeze(0))
    checks.true("every rank holds the same weights", bool((gathered == gathered[0]).all()))


def test_keras_training_with_adasum_converges(checks):
    import keras
    import hvdlite.tensorflow.keras as hvd_keras
    keras.utils.set_random_seed(0)
    x, y, x_test, y_test = digits_shard(hvd.rank(), hvd.size())
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
    optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), op=hvd_keras.Adasum)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0,
                        callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    losses = history.history["loss"]
    checks.true("the loss falls", losses[-1] < losses[0] / 4, str(losses))
    checks.true("test accuracy above 90%", accuracy > 0.9, f"{accuracy:.3f}")
    flat = np.concatenate([np.asarray(w).ravel() for w in model.get_weights()])
    gathered = hvd.allgather(flat.reshape(1, -1))
    checks.true("every rank holds the same weights", bool((gathered == gathered[0]).all()))
