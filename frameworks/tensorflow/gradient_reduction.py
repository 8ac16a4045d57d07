"""Reduces the gradients of one step across ranks: the shared core of DistributedGradientTape and the Keras
DistributedOptimizer.

Dense gradients of a group travel as one grouped allreduce (one negotiation; the core fuses them up to its
fusion threshold). ``tf.IndexedSlices`` gradients (embeddings) are allgathered, or densified first with
``sparse_as_dense=True``. Names are ``<prefix>.<position>``: fixed from step to step, so that the core's
response cache serves every step after the first, and independent of variable names, which TensorFlow may
have uniquified differently on different ranks.
"""
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from hvdlite.ops import Adasum, Average
from hvdlite.process_sets import global_process_set

from .compression import Compression
from .mpi_ops import _allreduce_group, _allreduce_indexed_slices, _check_op


@dataclass(frozen=True)
class ReductionSettings:
    compression: Any = Compression.none
    sparse_as_dense: bool = False
    op: int = Average
    gradient_predivide_factor: float = 1.0
    num_groups: int = 0
    groups: Any = None
    process_set: Any = global_process_set
    scale_local_gradients: bool = True

    def __post_init__(self):
        _check_op(self.op)
        if self.gradient_predivide_factor != 1.0 and self.op != Average:
            raise ValueError("gradient_predivide_factor is only supported with op=Average")
        if self.op == Adasum and self.gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor is not supported with op=Adasum")
        if self.num_groups and self.groups is not None:
            raise ValueError("pass either num_groups or groups, not both")
        if self.groups is not None and not isinstance(self.groups, (int, list, tuple)):
            raise ValueError("groups must be a non-negative integer or a list of lists of variables")

    def scale_factors(self):
        """(prescale, postscale) for the dense allreduce: predivide by the factor before summing, the rest
        of the average after."""
        if self.op == Average and self.gradient_predivide_factor != 1.0:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0


def _group_positions(positions, variables, settings):
    """Splits the positions of the dense gradients into the groups that travel together."""
    if not positions:
        return []
    groups = settings.groups if settings.groups is not None else settings.num_groups
    if isinstance(groups, int):
        if groups <= 0 or groups >= len(positions):
            return [positions] if groups <= 0 else [[p] for p in positions]
        size = -(-len(positions) // groups)
        return [positions[i:i + size] for i in range(0, len(positions), size)]
    # A list of lists of variables: each inner list is one group; every other gradient is a group of its own.
    group_of = {}
    for g, members in enumerate(groups):
        for v in members:
            group_of[id(v)] = g
    buckets, singles = {}, []
    for p in positions:
        g = group_of.get(id(variables[p])) if variables is not None else None
        if g is None:
            singles.append([p])
        else:
            buckets.setdefault(g, []).append(p)
    return [buckets[g] for g in sorted(buckets)] + singles


@tf.autograph.experimental.do_not_convert
def allreduce_gradients(grads, variables, settings, prefix, local_variables=()):
    """Returns ``grads`` reduced across the process set; None entries stay None.

    ``variables`` (same length, or None) is used for ``groups`` and ``local_variables``: the gradients of
    local variables are not communicated, and are divided by the set size when ``scale_local_gradients``.
    """
    grads = list(grads)
    process_set = settings.process_set
    if process_set.size() == 1 or not process_set.included():
        return grads
    local_ids = {id(v) for v in local_variables}
    results = list(grads)
    dense, sparse = [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if variables is not None and id(variables[i]) in local_ids:
            if settings.scale_local_gradients:
                results[i] = _scale(g, 1.0 / process_set.size())
            continue
        if isinstance(g, tf.IndexedSlices):
            if settings.sparse_as_dense:
                results[i] = tf.convert_to_tensor(g)
                dense.append(i)
            else:
                sparse.append(i)
        else:
            dense.append(i)
    prescale, postscale = settings.scale_factors()
    for i in sparse:
        results[i] = _allreduce_indexed_slices(results[i], settings.op, prescale, postscale, f"{prefix}.{i}",
                                               process_set)
    for group in _group_positions(dense, variables, settings):
        compressed, contexts = zip(*[settings.compression.compress(tf.convert_to_tensor(results[i]))
                                     for i in group])
        # Gradients need no gradient of their own: the plain (non-differentiable) path saves identity ops.
        reduced = _allreduce_group(list(compressed), [f"{prefix}.{i}" for i in group], settings.op, prescale,
                                   postscale, process_set, differentiable=False)
        for i, r, ctx in zip(group, reduced, contexts):
            results[i] = settings.compression.decompress(r, ctx)
    return results


def _scale(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.constant(factor, dtype=grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad * tf.constant(factor, dtype=grad.dtype)

