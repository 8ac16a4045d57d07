"""What each rank of a TorchEstimator's fit runs: the model and optimizer from the driver (or the run's last
checkpoint), hvdlite.torch's DistributedOptimizer, epochs of this rank's batches from the Store's Parquet
(hvdlite/spark/common/reader.py), losses and metrics averaged over the ranks, a checkpoint a epoch written by rank
0. Rank 0 returns the history and the final state; the others None."""
import io
import math
import posixpath


def train(spec):
    import numpy as np
    import torch

    import hvdlite.torch as hvd
    from hvdlite.spark.common import reader

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if spec["random_seed"] is not None:
        torch.manual_seed(spec["random_seed"])
    device = torch.device("cpu")
    if spec["use_gpu"] and torch.cuda.is_available():
        device = torch.device("cuda", hvd.local_rank())
        torch.cuda.set_device(device)
    state = torch.load(io.BytesIO(spec["state"]), map_location="cpu", weights_only=False)
    model = spec["model"].to(device)
    model.load_state_dict(state["model"])
    optimizer = spec["optimizer_cls"](model.parameters(), lr=1.0)  # its hyperparameters come with its state
    optimizer.load_state_dict(state["optimizer"])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    passes = spec["backward_passes_per_step"]
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=spec["gradient_compression"] or hvd.Compression.none,
                                         backward_passes_per_step=passes)
    losses = spec["losses"]
    columns = {name: meta["shape"] for name, meta in spec["metadata"].items()}
    features, labels, weight = spec["feature_cols"], spec["label_cols"], spec["sample_weight_col"]
    shapes = spec["input_shapes"]

    def tensors(batch):
        columns = batch_tensors(batch, features, shapes, spec["transformation_fn"])
        inputs = [columns[name].to(device) for name in features]
        targets = [(y if y.is_floating_point() else y.long()).to(device) for y in (columns[n] for n in labels)]
        weights = columns[weight].float().to(device) if weight else None
        return inputs, targets, weights

    def forward(batch):
        inputs, targets, weights = tensors(batch)
        outputs = model(*inputs)
        outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        if len(outputs) != len(targets):
            raise ValueError(f"the model returns {len(outputs)} outputs for {len(targets)} label columns {labels}")
        total = 0.0
        for i, (output, target) in enumerate(zip(outputs, targets)):
            loss = losses[i](output, target)
            if weights is not None:
                if loss.dim() == 0:
                    raise ValueError("with sample_weight_col the loss must give one value a row (reduction='none')")
                loss = (loss * weights).sum() / weights.sum()
            total = total + spec["loss_weights"][i] * loss
        return outputs, targets, total

    groups, val_groups = reader.fit_data(spec)
    steps = spec["train_steps_per_epoch"] or max(1, groups.rows // (size * spec["batch_size"]))
    steps = -(-steps // passes) * passes  # whole optimizer steps: every pass's gradients are all-reduced
    metrics = spec["metrics"]
    names = [getattr(m, "__name__", type(m).__name__) for m in metrics]
    history = state.get("history") or {}
    for epoch in range(state.get("epoch", -1) + 1, spec["epochs"]):
        model.train()
        sums = np.zeros(1 + len(metrics))
        optimizer.zero_grad()
        for step, batch in enumerate(reader.batches(groups, columns, rank, size, spec["batch_size"], steps,
                                                    spec["random_seed"], epoch, spec["shuffle"])):
            outputs, targets, loss = forward(batch)
            (loss / passes).backward()
            if (step + 1) % passes == 0:
                optimizer.step()
                optimizer.zero_grad()
            with torch.no_grad():
                sums += [loss.item(), *[float(m(outputs[0], targets[0])) for m in metrics]]
        averaged = hvd.allreduce(torch.tensor(sums / steps, dtype=torch.float64), name="hvdlite.fit.train",
                                 op=hvd.Average).tolist()
        record = {"loss": averaged[0], **dict(zip(names, averaged[1:]))}
        if val_groups is not None:
            model.eval()
            val_sums = np.zeros(2 + len(metrics))  # rows, then each figure times its batch's rows
            with torch.no_grad():
                for batch in reader.whole_share(val_groups, columns, rank, size, spec["val_batch_size"],
                                                spec["validation_steps_per_epoch"]):
                    outputs, targets, loss = forward(batch)
                    count = reader.rows_in(batch)
                    val_sums += [count, count * loss.item(),
                                 *[count * float(m(outputs[0], targets[0])) for m in metrics]]
            totals = hvd.allreduce(torch.tensor(val_sums, dtype=torch.float64), name="hvdlite.fit.val",
                                   op=hvd.Sum).tolist()
            rows = max(totals[0], 1)
            record.update({"val_loss": totals[1] / rows, **{f"val_{n}": v / rows for n, v in zip(names, totals[2:])}})
        for key, value in record.items():
            history.setdefault(key, []).append(value)
        if rank == 0:
            if spec["verbose"]:
                print(f"epoch {epoch + 1}/{spec['epochs']}: " + ", ".join(f"{k} {v:.4f}" for k, v in record.items()),
                      flush=True)
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                          "history": history}
            spec["store"].write_object(posixpath.join(spec["checkpoint_path"], spec["checkpoint_name"]), checkpoint,
                                       torch.save)
        if spec["terminate_on_nan"] and not math.isfinite(record["loss"]):
            break
    result = None
    if rank == 0:
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
        result = (history, buffer.getvalue())
    hvd.shutdown()
    return result


def batch_tensors(batch, features, shapes, transformation_fn):
    """A batch's arrays ({column: array}, after transformation_fn) as {column: tensor}: copies (the reader's arrays
    are read-only views of Arrow's), floating point as float32, feature columns shaped as input_shapes say."""
    import torch
    if transformation_fn is not None:
        batch = transformation_fn(batch)
    tensors = {}
    for name, values in batch.items():
        tensor = torch.tensor(values)
        tensor = tensor.float() if tensor.is_floating_point() else tensor
        if shapes and name in features:
            tensor = tensor.reshape(shapes[features.index(name)])
        tensors[name] = tensor
    return tensors
