"""SyncBatchNormalization: Keras batch normalization whose training statistics cover the whole global batch.

Each rank sums its batch's values, squares and count over the reduction axes; one allreduce (Sum) of the three
gives the global mean and variance, so ranks may hold batches of different sizes (and masks). The allreduce is
differentiable, so the gradient also flows through the other ranks' statistics, as in a single large batch. Inference uses the moving statistics, as plain Keras does.
"""
import keras
import tensorflow as tf

from hvdlite.ops import Sum
from hvdlite.process_sets import global_process_set

from .mpi_ops import allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` with statistics reduced over the process set during training.

    Takes Horovod's arguments: ``fused`` must be False (the default; True or None raises ValueError, as in
    Horovod, since a fused kernel computes the statistics itself); everything else is BatchNormalization's.
    """

    def __init__(self, fused=False, process_set=global_process_set, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        kwargs.pop("synchronized", None)  # that is tf.distribute's synchronisation; this layer does its own
        super().__init__(**kwargs)
        self.process_set = process_set

    def _moments(self, inputs, mask):
        if self.process_set.size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        if mask is None:
            weights = tf.ones_like(inputs)
        else:
            weights = tf.broadcast_to(tf.cast(tf.expand_dims(mask, -1), inputs.dtype), tf.shape(inputs))
        count = tf.reduce_sum(weights, axis=axes)
        total = tf.reduce_sum(inputs * weights, axis=axes)
        squares = tf.reduce_sum(tf.square(inputs) * weights, axis=axes)
        reduced = allreduce(tf.stack([total, squares, count]), op=Sum, name=f"{self.name}.moments",
                            process_set=self.process_set)
        global_count = tf.maximum(reduced[2], 1.0)
        mean = reduced[0] / global_count
        variance = tf.maximum(reduced[1] / global_count - tf.square(mean), 0.0)
        return mean, variance

    def get_config(self):
        config = super().get_config()
        config.pop("synchronized", None)
        return config
