"""What the Spark ML Estimators' tests share (test_spark_estimators.py, test_spark_keras_estimator.py,
test_spark_lightning_estimator.py), besides conftest.py's Spark and digits: the rows a fit wrote to the Store, and a
transformation_fn that makes rank 1 fail once its run has a checkpoint. Its functions travel to the Spark tasks by
value (cloudpickle), as the tests' own do."""
import os
import sys

import time

import cloudpickle
import numpy as np
import pytest

import hvdlite.spark
from hvdlite.spark.common.backend import SparkBackend
from hvdlite.spark.common.reader import RowGroups

cloudpickle.register_pickle_by_value(sys.modules[__name__])
TOLERANCE = 0.05  # validation accuracy: 2 ranks against one process on the same rows
EPOCHS, BATCH, LR, SEED = 6, 32, 0.3, 7


def prepared_paths(store):
    """(training path, validation path) of the one data set fits wrote to store."""
    prepared = [p for p in os.listdir(store.prefix_path) if p.startswith("intermediate_train_data.")]
    assert len(prepared) == 1, os.listdir(store.prefix_path)
    key = prepared[0].split(".", 1)[1]
    return store.get_train_data_path(key), store.get_val_data_path(key)


def rows(store, path):
    """(features float32 (rows, 64), labels) of a data set a fit wrote."""
    columns = {"features": [64], "label": []}
    groups = RowGroups(store, path)
    parts = [groups.read(unit, columns) for unit in groups.units]
    return (np.concatenate([p["features"] for p in parts]).astype(np.float32),
            np.concatenate([p["label"] for p in parts]))


def torch_accuracy_alone(model, optimizer, store, train_path, val_path):
    """A torch model trained in this process on a fit's training rows (EPOCHS of batches of BATCH x 2, as 2 ranks
    of BATCH average, cross-entropy), then its accuracy on the fit's validation rows."""
    import torch
    x, y = (torch.as_tensor(a) for a in rows(store, train_path))
    y = y.long()
    rng = np.random.default_rng(SEED)
    steps = len(y) // (2 * BATCH)
    for _ in range(EPOCHS):
        order = rng.permutation(len(y))
        for s in range(steps):
            pick = order[s * 2 * BATCH:(s + 1) * 2 * BATCH]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[pick]), y[pick]).backward()
            optimizer.step()
    vx, vy = (torch.as_tensor(a) for a in rows(store, val_path))
    with torch.no_grad():
        return float((model(vx).argmax(1) == vy.long()).float().mean())


def by_id(frame, column):
    """column's values in id order, stacked."""
    return np.stack([r[1] for r in sorted(frame.select("id", column).collect())])


def fails_on_rank_1_after_the_first_checkpoint(batch):
    """transformation_fn: rank 1's data source breaks once the run's first checkpoint exists (after its first
    epoch); HVDLITE_TEST_CHECKPOINT names the checkpoint's file."""
    import hvdlite
    if hvdlite.rank() == 1 and os.path.exists(os.environ["HVDLITE_TEST_CHECKPOINT"]):
        raise OSError("rank 1 lost its data")
    return batch


def fails_then_resumes(estimator, store, digits, checkpoint_name, loss_key, bound_s, env=None):
    """A fit whose rank 1 fails once the run's first checkpoint exists raises RankFailed naming the rank's error within
    bound_s seconds and leaves that checkpoint; the same run_id then resumes from it: the history holds the epoch
    from the checkpoint and the one trained now. estimator(store, **changes) makes the Estimator under test."""
    checkpoint = os.path.join(store.get_checkpoint_path("resumed"), checkpoint_name)
    backend = SparkBackend(num_proc=2, env={**(env or {}), "HVDLITE_TEST_CHECKPOINT": checkpoint})
    failing = estimator(store, num_proc=None, backend=backend, run_id="resumed", epochs=2,
                        transformation_fn=fails_on_rank_1_after_the_first_checkpoint)
    started = time.monotonic()
    with pytest.raises(hvdlite.spark.RankFailed, match=r"(?s)rank 1.*OSError: rank 1 lost its data"):
        failing.fit(digits)
    assert time.monotonic() - started < bound_s
    assert os.path.exists(checkpoint)
    history = estimator(store, run_id="resumed", epochs=2, verbose=1).fit(digits).getHistory()
    assert len(history[loss_key]) == 2, history  # epoch 1 from the checkpoint, epoch 2 now
    assert history["val_accuracy"][-1] > 0.8, history
