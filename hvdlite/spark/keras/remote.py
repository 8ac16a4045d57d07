"""What each rank of a KerasEstimator's fit runs: the model and optimizer from the driver (and the run's last
checkpoint, where it resumes), hvdlite.keras's DistributedOptimizer, ``model.fit`` on this rank's batches from the
Store's Parquet (hvdlite/spark/common/reader.py) with rank 0's starting weights broadcast and the epoch's metrics
averaged, validation over every rank's share weighted by its rows, and a checkpoint a epoch written by rank 0. Rank
0 returns the history and the final weights; the others None."""
import math
import pickle
import posixpath


def train(spec):
    import keras
    import numpy as np

    import hvdlite.keras as hvd
    from hvdlite.spark.common import reader
    from hvdlite.spark.keras import packing

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec["random_seed"] is not None:
        keras.utils.set_random_seed(spec["random_seed"])
    custom_objects = spec["custom_objects"]
    model = packing.model_from_bytes(spec["model"], custom_objects)
    state = pickle.loads(spec["state"]) if spec["state"] else {}
    passes = spec["backward_passes_per_step"]
    optimizer = hvd.DistributedOptimizer(packing.optimizer_from_config(spec["optimizer"], custom_objects),
                                         compression=spec["gradient_compression"] or hvd.Compression.none,
                                         backward_passes_per_step=passes, average_aggregated_gradients=True)
    model.compile(optimizer=optimizer, loss=spec["loss"], loss_weights=spec["loss_weights"],
                  metrics=spec["metrics"])
    if state:
        model.set_weights(state["weights"])
        optimizer.build(model.trainable_variables)
        for variable, value in zip(optimizer.variables, state["optimizer"]):
            variable.assign(value)

    columns = {name: meta["shape"] for name, meta in spec["metadata"].items()}
    features, labels, weight = spec["feature_cols"], spec["label_cols"], spec["sample_weight_col"]
    shapes = spec["input_shapes"] or [input_shape(model, i) for i in range(len(features))]

    def arrays(batch):
        if spec["transformation_fn"] is not None:
            batch = spec["transformation_fn"](batch)
        x = [shaped(np.asarray(batch[name]), shapes[i]) for i, name in enumerate(features)]
        y = [_floats(np.asarray(batch[name])) for name in labels]
        x, y = (x[0] if len(x) == 1 else tuple(x)), (y[0] if len(y) == 1 else tuple(y))
        return (x, y, np.asarray(batch[weight], dtype=np.float32)) if weight else (x, y)

    groups, val_groups = reader.fit_data(spec)
    steps = spec["train_steps_per_epoch"] or max(1, groups.rows // (size * spec["batch_size"]))
    steps = -(-steps // passes) * passes  # whole optimizer steps: every pass's gradients are all-reduced
    initial_epoch = state.get("epoch", -1) + 1
    history = state.get("history") or {}

    def training_batches():
        for epoch in range(initial_epoch, spec["epochs"]):
            for batch in reader.batches(groups, columns, rank, size, spec["batch_size"], steps, spec["random_seed"],
                                        epoch, spec["shuffle"]):
                yield arrays(batch)

    def validate(names):
        """{"val_<name>": value} of each training figure over every rank's validation rows, each rank's figures
        weighted by its rows (names: the epoch's training figures, the same on every rank)."""
        sums = np.zeros(1 + len(names))
        for batch in reader.whole_share(val_groups, columns, rank, size, spec["val_batch_size"],
                                        spec["validation_steps_per_epoch"]):
            model.reset_metrics()  # test_on_batch adds to the metrics' state: each batch's figures alone
            figures = model.test_on_batch(*arrays(batch), return_dict=True)
            count = reader.rows_in(batch)
            sums += [count, *[count * float(figures[n]) for n in names]]
        totals = np.asarray(hvd.allreduce(sums, name="hvdlite.fit.val", op=hvd.Sum))
        rows = max(float(totals[0]), 1.0)
        return {f"val_{n}": float(v) / rows for n, v in zip(names, totals[1:])}

    class EpochEnd(keras.callbacks.Callback):
        """Validation, the history and rank 0's checkpoint, after the epoch's training metrics are averaged."""

        def on_epoch_end(self, epoch, logs=None):
            logs = logs if logs is not None else {}
            if val_groups is not None:
                logs.update(validate(sorted(logs)))
            for key, value in logs.items():
                history.setdefault(key, []).append(float(value))
            if rank == 0:
                if spec["verbose"]:
                    print(f"epoch {epoch + 1}/{spec['epochs']}: "
                          + ", ".join(f"{k} {float(v):.4f}" for k, v in logs.items()), flush=True)
                spec["store"].write_object(posixpath.join(spec["checkpoint_path"], spec["checkpoint_name"]),
                                           _state(model, optimizer, epoch, history), pickle.dump)
            if spec["terminate_on_nan"] and not math.isfinite(float(logs.get("loss", 0.0))):
                self.model.stop_training = True

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                 EpochEnd(), *(spec["callbacks"] or [])]
    if initial_epoch < spec["epochs"]:
        # shuffle=False: the batches come shuffled (reader.batches), which Keras cannot do for a generator.
        model.fit(training_batches(), steps_per_epoch=steps, epochs=spec["epochs"], initial_epoch=initial_epoch,
                  callbacks=callbacks, verbose=0, shuffle=False)
    result = (history, pickle.dumps(_state(model, optimizer, spec["epochs"] - 1, history))) if rank == 0 else None
    hvd.shutdown()
    return result


def _state(model, optimizer, epoch, history):
    return {"weights": model.get_weights(), "optimizer": [v.numpy() for v in optimizer.variables], "epoch": epoch,
            "history": history}


def input_shape(model, index):
    """The model's i-th input's shape, the batch leading as -1 (None where the model has no fixed inputs)."""
    inputs = getattr(model, "inputs", None) or []
    if index >= len(inputs):
        return None
    return [-1, *[d if d is not None else -1 for d in inputs[index].shape[1:]]]


def shaped(values, shape):
    values = _floats(values)
    if shape is None or -1 in shape[1:]:
        return values
    return values.reshape(shape)


def _floats(values):
    import numpy as np
    return values.astype(np.float32) if values.dtype == np.float64 else values
