"""DistributedGradientTape: a tf.GradientTape whose ``gradient()`` returns gradients averaged across ranks."""
import tensorflow as tf

from hvdlite.ops import Average
from hvdlite.process_sets import global_process_set

from .compression import Compression
from .gradient_reduction import ReductionSettings, allreduce_gradients


class _DistributedTapeMethods:
    """Mixed in front of the wrapped tape's own class, so that the result is still that class."""

    @tf.autograph.experimental.do_not_convert
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE, use_generic_names=False):
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        reduced = allreduce_gradients(flat_grads, flat_sources if len(flat_sources) == len(flat_grads) else None,
                                      self._hvdlite_settings, "DistributedGradientTape",
                                      local_variables=self._hvdlite_local_sources)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)

    def register_local_source(self, source):
        """Marks a variable whose gradient stays local to this rank (not communicated)."""
        self._hvdlite_local_sources.append(source)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Wraps ``gradtape`` so that ``gradient()`` allreduces all gradients of the call as one group.

    Use after recording (``tape = hvd.DistributedGradientTape(tape)``) or around a fresh tape
    (``with hvd.DistributedGradientTape(tf.GradientTape()) as tape:``). ``op`` is Average by default;
    ``gradient_predivide_factor`` splits the average into a division before and after the sum;
    ``sparse_as_dense`` densifies ``tf.IndexedSlices`` gradients instead of allgathering them;
    ``num_groups``/``groups`` split the gradients into several groups. ``device_*`` are accepted for
    Horovod's signature (CPU tensors only in this build).
    """
    settings = ReductionSettings(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                                 gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
                                 groups=groups, process_set=process_set,
                                 scale_local_gradients=scale_local_gradients)
    base = gradtape.__class__
    cls = type(base.__name__, (_DistributedTapeMethods, base), {})
    tape = cls.__new__(cls)
    # Share the recorded state: the new object is the same tape with a distributed gradient().
    tape.__dict__.update(gradtape.__dict__)
    tape._hvdlite_settings = settings
    tape._hvdlite_local_sources = []
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """A ``DistributedGradientTape`` that leaves the gradients of ``local_layers`` (a Keras layer or a list of
    them) on this rank: they are not communicated, and are divided by the set's size when
    ``scale_local_gradients`` (so that they stay on the scale of the averaged ones)."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        tape.register_local_source(variable)
    return tape


def local_layer_variables(local_layers):
    """The trainable variables of a Keras layer, or of a list of layers (None: no layer)."""
    import keras
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("local_layers must be a Keras layer or a list of Keras layers")
    return [v for layer in local_layers for v in layer.trainable_weights]
