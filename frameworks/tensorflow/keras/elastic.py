"""``hvd.elastic`` for Keras: KerasState and the callbacks that keep it committed during ``model.fit``.

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        model.fit(..., initial_epoch=state.epoch, epochs=epochs, callbacks=callbacks)
"""
import keras

from hvdlite.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run  # noqa: F401

from ..elastic import TensorFlowKerasState, TensorFlowState  # noqa: F401

KerasState = TensorFlowKerasState


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every ``batches_per_commit`` batches. The commit happens as the next batch begins (and
    UpdateEpochStateCallback commits at each epoch's end), so that the batch and epoch counts it records are
    those of the batches done, whatever the order of the callbacks in the list."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_done = 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches_done += 1

    def on_train_batch_begin(self, batch, logs=None):
        if self.batches_done >= self.batches_per_commit:
            self.state.commit()
            self.batches_done = 0

    def on_epoch_end(self, epoch, logs=None):
        self.batches_done = 0


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the number of batches done in the current epoch (0 at each epoch's end). A fit
    that resumes an epoch (on the batches after ``state.batch``) counts on from there."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.offset = 0

    def on_train_begin(self, logs=None):
        self.offset = getattr(self.state, "batch", 0)

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = self.offset + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self.offset = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Counts finished epochs in ``state.epoch`` (and commits at each epoch's end, batch count reset)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch += 1
        if hasattr(self.state, "batch"):
            self.state.batch = 0
        self.state.commit()
