"""Keras callbacks for data-parallel training: broadcast the initial state, average the epoch's metrics,
and schedule the learning rate (warmup for the large batch of many ranks)."""
import keras
import numpy as np

from hvdlite import basics
from hvdlite.process_sets import global_process_set

from ..functions import broadcast_variables
from ..mpi_ops import Average, grouped_allreduce


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from ``root_rank`` before training starts, so
    that every rank starts from the same state (random initialisation or a checkpoint loaded on the root).

    The broadcast happens in ``on_train_begin`` (building the optimizer there if needed); for a model that is
    not built before its first batch it happens after the first batch instead, as Horovod does.
    ``local_variables`` (a variable or a list) keep each rank's own values, for layers trained locally.
    """

    def __init__(self, root_rank, device="", local_variables=None, process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set
        if local_variables is not None and not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        self.local_variables = list(local_variables or [])
        self.broadcast_done = False

    def _broadcast(self):
        variables = list(self.model.variables)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            variables += list(optimizer.variables)
        local = {id(v) for v in self.local_variables}
        variables = [v for v in variables if id(v) not in local]
        broadcast_variables(variables, self.root_rank, process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if self.broadcast_done or not self.model.built:
            return
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            # Keras would build it while tracing the first step; building it now (as Keras does under a
            # distribution strategy) lets the optimizer's state start equal on every rank too.
            optimizer.build(self.model.trainable_variables)
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric in the epoch's logs by its average over the ranks (training and validation), so
    that every rank reports, checkpoints and early-stops on the same numbers. Put it before callbacks that
    read the logs."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.process_set = process_set

    def _average_in_place(self, logs):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and _is_number(v))
        if not names:
            return
        values = [np.asarray(float(logs[k]), dtype=np.float64) for k in names]
        averaged = grouped_allreduce(values, op=Average, name="MetricAverageCallback",
                                     process_set=self.process_set)
        for k, v in zip(names, averaged):
            logs[k] = float(v.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self._average_in_place(logs)


def _is_number(value):
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _get_lr(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` for epochs in [start_epoch, end_epoch).

    ``multiplier`` is a number or a function of the epoch. With ``staircase=True`` the rate changes at the
    start of each epoch; otherwise at every batch, with a fractional epoch (``epoch + batch/steps_per_epoch``;
    steps per epoch are taken from Keras when not given). ``momentum_correction`` scales the momentum buffers
    of a momentum optimizer by new_lr/old_lr when the rate changes, which is Horovod's one-step momentum
    correction for Keras 3's form of momentum (velocity = momentum * velocity - lr * grad).
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        if not callable(multiplier):
            constant = float(multiplier)
            staircase = True
            multiplier = lambda epoch: constant  # noqa: E731
        self.initial_lr = initial_lr
        self.multiplier = multiplier
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _autodetect_steps_per_epoch(self):
        steps = (self.params or {}).get("steps")
        if steps:
            return steps
        raise ValueError(f"could not find the number of steps per epoch; pass steps_per_epoch to "
                         f"{type(self).__name__}()")

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _get_lr(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            self._correct_momentum(optimizer, new_lr / old_lr)

    @staticmethod
    def _correct_momentum(optimizer, ratio):
        if not getattr(optimizer, "momentum", 0) or not hasattr(optimizer, "momentums"):
            return
        for velocity in optimizer.momentums:
            velocity.assign(velocity * ratio)

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if not self._in_range(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._adjust_learning_rate(self.current_epoch)
        else:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate gradually from ``initial_lr / size`` to ``initial_lr`` over ``warmup_epochs``
    (Goyal et al., "Accurate, Large Minibatch SGD"): large learning rates for the large global batch of many
    ranks are unstable at the start of training. The rate is updated at every batch::

        lr(epoch) = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)

    with the fractional epoch advanced by one batch, so that the last batch of the warmup reaches initial_lr.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch
            size = basics.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch,
                         verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and basics.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {_get_lr(self.model.optimizer):g}.")


__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback"]
