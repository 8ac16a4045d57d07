"""DistributedOptimizer for Keras 3 optimizers (SGD, Adam, AdamW, ... and subclasses of keras.optimizers.Optimizer).

The wrapped optimizer is an instance of a class made on the fly: ``<the optimizer's class>`` with ``apply()``
overridden to allreduce the gradients first (``apply_gradients`` and ``model.fit`` go through ``apply``).
Everything Keras does after that (loss-scale unscaling, clipping, weight decay, the update, EMA) sees the
reduced gradients, as with one large batch. The class keeps the original's name and module, so a model saved
with it loads in plain Keras as the original optimizer.

``backward_passes_per_step=N`` accumulates gradients locally for N calls and reduces and applies on every
N-th; the other calls leave the weights alone but count in ``optimizer.iterations`` (as Horovod counts).
"""
import keras
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from hvdlite.ops import Average
from hvdlite.process_sets import global_process_set

from ..compression import Compression
from ..gradient_reduction import ReductionSettings, allreduce_gradients


class _GradientAccumulation:
    """Per-variable sums of the gradients since the last reduction, and the count of backward passes.
    Held outside Keras' variable tracking: not saved with the optimizer, zero at start on every rank."""

    def __init__(self, variables):
        with tf.init_scope():
            self.sums = [tf.Variable(tf.zeros(tuple(v.shape), dtype=v.dtype), trainable=False,
                                     name="hvdlite_gradient_sum") for v in variables]
            self.passes = tf.Variable(0, dtype=tf.int64, trainable=False, name="hvdlite_backward_passes")


class _DistributedOptimizerMethods:
    """Put in front of the wrapped optimizer's class. Settings are class attributes, so that
    ``from_config`` (used when loading a saved model) makes a distributed optimizer too."""

    _hvdlite_settings = ReductionSettings()
    _hvdlite_backward_passes_per_step = 1
    _hvdlite_average_aggregated_gradients = False
    _hvdlite_prefix = "DistributedOptimizer"

    @tf.autograph.experimental.do_not_convert
    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        _refuse_xla()
        variables = list(trainable_variables) if trainable_variables is not None else \
            list(getattr(self, "_trainable_variables", []) or [])
        if self._hvdlite_backward_passes_per_step == 1:
            return super().apply(self._hvdlite_reduce(grads, variables), trainable_variables)
        return self._hvdlite_accumulate_and_apply(grads, variables, trainable_variables)

    def register_local_var(self, var):
        """Marks a variable whose gradient is not communicated (it stays local to this rank)."""
        self._hvdlite_local_vars_list().append(var)

    def _hvdlite_local_vars_list(self):
        if "_hvdlite_local_vars" not in self.__dict__:
            object.__setattr__(self, "_hvdlite_local_vars", [])
        return self.__dict__["_hvdlite_local_vars"]

    def _hvdlite_reduce(self, grads, variables):
        return allreduce_gradients(grads, variables if len(variables) == len(grads) else None,
                                   self._hvdlite_settings, self._hvdlite_prefix,
                                   local_variables=self._hvdlite_local_vars_list())

    def _hvdlite_accumulation(self, variables):
        state = self.__dict__.get("_hvdlite_accumulation_state")
        if state is None:
            state = _GradientAccumulation(variables)
            object.__setattr__(self, "_hvdlite_accumulation_state", state)
        return state

    def _hvdlite_accumulate_and_apply(self, grads, variables, trainable_variables):
        if not self.built:
            # Build outside the conditional below: Keras creates its slot variables on the first apply.
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        state = self._hvdlite_accumulation(variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            state.sums[i].assign_add(tf.convert_to_tensor(grads[i]))
        passes = state.passes.assign_add(1)
        steps = self._hvdlite_backward_passes_per_step
        parent_apply = super().apply

        def reduce_and_apply():
            scale = 1.0 / steps if self._hvdlite_average_aggregated_gradients else 1.0
            summed = [None] * len(grads)
            for i in present:
                value = state.sums[i].read_value()
                summed[i] = value * tf.constant(scale, dtype=value.dtype) if scale != 1.0 else value
            parent_apply(self._hvdlite_reduce(summed, variables), trainable_variables)
            for i in present:
                state.sums[i].assign(tf.zeros_like(state.sums[i]))
            return tf.constant(True)

        def count_pass():
            self._iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            return reduce_and_apply() if int(passes) % steps == 0 else count_pass()
        return tf.cond(tf.equal(passes % steps, 0), reduce_and_apply, count_pass)


def _refuse_xla():
    if tf.executing_eagerly():
        return
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise RuntimeError("hvdlite's collectives cannot run inside XLA-compiled code: compile the model with "
                           "model.compile(..., jit_compile=False) or drop jit_compile=True from tf.function")


def is_distributed(optimizer):
    return isinstance(optimizer, _DistributedOptimizerMethods)


def distributed_class(base, settings, backward_passes_per_step=1, average_aggregated_gradients=False,
                      prefix=None):
    """The class ``base`` with gradient reduction in front, named and placed like ``base``."""
    attrs = {
        "_hvdlite_settings": settings,
        "_hvdlite_backward_passes_per_step": int(backward_passes_per_step),
        "_hvdlite_average_aggregated_gradients": bool(average_aggregated_gradients),
        "_hvdlite_prefix": prefix or f"Distributed{base.__name__}",
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    }
    return type(base.__name__, (_DistributedOptimizerMethods, base), attrs)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Returns a new optimizer of ``optimizer``'s class and configuration that averages gradients across ranks
    before applying them. State the original already has (slots, iterations) is copied over.

    ``name`` prefixes the names of its collectives (default ``Distributed<Class>``); ``op``, ``compression``,
    ``sparse_as_dense``, ``gradient_predivide_factor``, ``num_groups``/``groups`` and ``process_set`` are as
    for ``DistributedGradientTape``; ``backward_passes_per_step`` accumulates that many gradients locally before
    each reduction, averaging them if ``average_aggregated_gradients`` (summing them otherwise).
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"hvdlite.tensorflow.keras.DistributedOptimizer wraps Keras 3 optimizers "
                        f"(keras.optimizers.Optimizer); got {type(optimizer).__name__}")
    if is_distributed(optimizer):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be at least 1")
    settings = ReductionSettings(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                                 gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
                                 groups=groups, process_set=process_set,
                                 scale_local_gradients=scale_local_gradients)
    cls = distributed_class(type(optimizer), settings, backward_passes_per_step, average_aggregated_gradients,
                            prefix=name)
    distributed = cls.from_config(optimizer.get_config())
    if optimizer.built:
        distributed.build(list(optimizer._trainable_variables))
        for target, source in zip(distributed.variables, optimizer.variables):
            target.assign(source)
    return distributed


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, scale_local_gradients=True,
                                local_layers=None):
    """A ``DistributedOptimizer`` that leaves the gradients of ``local_layers`` (a Keras layer or a list of
    them) on this rank, scaled by 1/size when ``scale_local_gradients``, as Horovod's does."""
    from ..gradient_tape import local_layer_variables
    distributed = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
                                       gradient_predivide_factor, op, backward_passes_per_step,
                                       average_aggregated_gradients, 0, groups, process_set,
                                       scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        distributed.register_local_var(variable)
    return distributed


def wrap_in_place(optimizer, **kwargs):
    """Makes an existing optimizer distributed without copying it (used by load_model, whose optimizer
    already holds the saved state). ``kwargs`` are DistributedOptimizer's."""
    if is_distributed(optimizer):
        return optimizer
    bpps = kwargs.pop("backward_passes_per_step", 1)
    average = kwargs.pop("average_aggregated_gradients", False)
    prefix = kwargs.pop("name", None)
    for ignored in ("device_dense", "device_sparse"):
        kwargs.pop(ignored, None)
    optimizer.__class__ = distributed_class(type(optimizer), ReductionSettings(**kwargs), bpps, average, prefix)
    return optimizer
