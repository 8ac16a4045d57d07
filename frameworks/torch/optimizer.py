"""DistributedOptimizer: averages gradients over the ranks, overlapping communication with backward.

A post-accumulate-grad hook on every parameter fires as soon as that parameter's gradient is final during
``loss.backward()`` and starts its all-reduce in place at once, so the last layers' gradients travel while
autograd is still computing the first layers' (unless HVDLITE_OVERLAP holds async work until every rank
waits, as it does by default where ranks have no spare core). ``step()`` waits for the outstanding all-reduces
(submitting those whose parameters got no gradient on this rank, as zeros, so that no rank waits forever) and
then runs the wrapped optimizer's own step.
"""
import threading
import warnings
import weakref
from contextlib import contextmanager

import torch

from hvdlite.process_sets import global_process_set
from hvdlite.requests import Collective, PreparedRequest, Request, release_all

from . import async_ops as aops
from . import gpu_path, staging
from .async_ops import Adasum, Average, Sum
from .compression import Compression
from .handles import HorovodHandleWork
from .handles import synchronize as _synchronize_handle


class _Bucket:
    """Parameters whose gradients are all-reduced together (one parameter unless ``groups`` was given)."""

    __slots__ = ("params", "name", "ready", "work", "take", "contexts", "prepared", "placement", "sparse")

    def __init__(self, params, name):
        self.params = params
        self.name = name
        self.ready = set()
        self.work = None  # the Work in flight (hvdlite/work.py), None between steps
        # How the finished work's result reaches the gradients: None where it was reduced in place (the prepared
        # path: on a GPU, ordered before the caller's stream goes on), else a method of the optimizer.
        self.take = None
        self.contexts = None  # the general path's compressed gradients and their compression contexts
        self.prepared = None  # the PreparedRequest of the in-place fast path (see _submit_prepared)
        self.placement = None  # what it was prepared for: None (CPU), or the GPU and stream (gpu_path.placement)
        self.sparse = set()  # parameters whose sparse gradient is reduced dense (sparse_as_dense)


class _DistributedOptimizer:
    """Mixed in front of the wrapped optimizer's class; see ``DistributedOptimizer``."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                   groups, sparse_as_dense, process_set):
        aops.check_op(op)
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
        self._compression = compression
        self._op = op
        self._gradient_predivide_factor = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step

        names = self._name_parameters(named_parameters)
        trainable = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        self._parameter_names = names
        self._buckets = self._make_buckets(trainable, groups, names)
        self._bucket_of = {p: b for b in self._buckets for p in b.params}
        self._delay = {p: backward_passes_per_step for p in trainable}
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        self._lock = threading.Lock()  # hooks may run on autograd's device threads
        self._adasum = op == Adasum
        if process_set.included() and not self._adasum:  # Adasum combines the steps, not the gradients
            self._register_hooks(trainable)

    # ------------------------------------------------------------------------------------------ set up

    def _name_parameters(self, named_parameters):
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: f"allreduce.noname.{i}.{j}"
                    for i, group in enumerate(self.param_groups) for j, p in enumerate(group["params"])}
        named = list(named_parameters)
        if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters().")
        seen, dups = set(), []
        for key, _ in named:
            if key in seen:
                dups.append(key)
            seen.add(key)
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                             + ", ".join(sorted(set(dups))))
        names = {}
        for key, p in named:
            names.setdefault(p, key)
        unnamed = [p for p in all_params if p not in names]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters were not named "
                             f"({len(unnamed)} of {len(all_params)}; shapes "
                             f"{[tuple(p.shape) for p in unnamed][:5]})")
        return names

    @staticmethod
    def _make_buckets(trainable, groups, names):
        if groups is None or groups == 0:
            lists = [[p] for p in trainable]
        elif isinstance(groups, int):
            if groups < 0:
                raise ValueError(f"groups must be a positive int or a list of lists of parameters, got {groups}")
            count = min(groups, len(trainable)) or 1
            lists = [trainable[i * len(trainable) // count:(i + 1) * len(trainable) // count]
                     for i in range(count)]
        else:
            listed, lists = set(), []
            for group in groups:
                group = [p for p in group if p.requires_grad]
                for p in group:
                    if p in listed:
                        raise ValueError(f"parameter {names.get(p)} appears in more than one group")
                    listed.add(p)
                if group:
                    lists.append(group)
            trainable_set = set(trainable)
            stray = [p for p in listed if p not in trainable_set]
            if stray:
                raise ValueError(f"groups contains parameters that the optimizer does not hold: "
                                 f"{[names.get(p) for p in stray]}")
            lists += [[p] for p in trainable if p not in listed]
        buckets = []
        for params in lists:
            if not params:
                continue
            label = names[params[0]] if len(params) == 1 else f"group.{names[params[0]]}+{len(params) - 1}"
            buckets.append(_Bucket(tuple(params), f"DistributedOptimizer.{label}"))
        return buckets

    def _register_hooks(self, params):
        self_ref = weakref.ref(self)

        def make_hook(p, bucket):
            def hook(_param):
                optimizer = self_ref()
                if optimizer is not None:
                    optimizer._gradient_ready(p, bucket)
            return hook
        for p in params:
            self._hook_handles.append(p.register_post_accumulate_grad_hook(make_hook(p, self._bucket_of[p])))

    # ------------------------------------------------------------------------------ during backward

    def _gradient_ready(self, p, bucket):
        with self._lock:
            delay = self._delay[p]
            if delay <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times before "
                                     "call to step(). Increase backward_passes_per_step to accumulate gradients "
                                     "locally.")
            self._synchronized = False
            self._delay[p] = delay - 1
            if delay == 1:
                bucket.ready.add(p)
                if len(bucket.ready) == len(bucket.params):
                    self._submit(bucket)

    def _scale_factors(self):
        if self._op == Average:
            return 1.0 / self._gradient_predivide_factor, self._gradient_predivide_factor
        return 1.0, 1.0

    def _submit(self, bucket):
        """Starts the all-reduce of the bucket's gradients (zeros where this rank has none)."""
        if self._submit_prepared(bucket):
            return
        prescale, postscale = self._scale_factors()
        bucket.sparse.clear()
        for p in bucket.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif p.grad.is_sparse and self._sparse_as_dense:
                # reduced dense, handed back sparse (a sparse optimizer such as SparseAdam takes no other)
                bucket.sparse.add(p)
                p.grad = p.grad.to_dense()
        if any(p.grad.is_sparse for p in bucket.params):
            bucket.work = self._submit_sparse(bucket, prescale)
            bucket.take = self._take_sparse
            return
        compressed, contexts = zip(*[self._compression.compress(p.grad) for p in bucket.params])
        if len(compressed) == 1:
            handle = aops.allreduce_async_(compressed[0], name=bucket.name, op=self._op, prescale_factor=prescale,
                                           postscale_factor=postscale, process_set=self.process_set)
        else:
            handle = aops.grouped_allreduce_async_(list(compressed), name=bucket.name, op=self._op,
                                                   prescale_factor=prescale, postscale_factor=postscale,
                                                   process_set=self.process_set)
        bucket.work = HorovodHandleWork(handle)
        bucket.take = self._take_decompressed
        bucket.contexts = (compressed, contexts)

    def _submit_prepared(self, bucket):
        """The common case made cheap (it runs in a hook for every parameter, every step): one parameter, a
        dense contiguous gradient on the CPU, or on a GPU where NCCL reduces it, no compression. Its request is
        filled in on the first step (again if the gradient moves to another GPU or stream) and then resubmitted
        with the gradient's current address, reduced in place. False where the general path is needed."""
        if len(bucket.params) != 1 or self._compression is not Compression.none:
            return False
        p = bucket.params[0]
        grad = p.grad
        if grad is None or grad.is_sparse or grad.dtype != p.dtype or not grad.is_contiguous():
            return False
        if gpu_path.on_one_gpu((grad,)):
            placement = gpu_path.placement(grad)
        elif grad.is_cpu:
            placement = None
        else:
            return False
        if bucket.prepared is None or bucket.placement != placement:
            prescale, postscale = self._scale_factors()
            if placement is not None and not gpu_path.serves((grad,), "allreduce", self._op, prescale, postscale):
                return False  # staged through host memory by the general path
            bucket.prepared = PreparedRequest(Request(
                Collective.ALLREDUCE, bucket.name, staging.core_dtype(p), tuple(p.shape), op=self._op,
                prescale_factor=prescale, postscale_factor=postscale, process_set=self.process_set, gpu=placement))
            bucket.placement = placement
        address = staging.address(grad)
        bucket.work = bucket.prepared.submit(address, address, grad)  # the core's Handle: no user handle needed
        bucket.take = None  # reduced in place
        return True

    def _submit_sparse(self, bucket, prescale):
        """Sparse gradients: every rank's (indices, values) gathered, as Horovod's sparse allreduce does; the
        work is what ``sparse_allreduce_async`` returns."""
        if len(bucket.params) != 1:
            raise ValueError("sparse gradients cannot be grouped; use sparse_as_dense=True")
        if self._op not in (Average, Sum):
            raise ValueError("sparse gradients support only op=Average or op=Sum")
        grad = bucket.params[0].grad
        return aops.sparse_allreduce_async(grad * prescale if prescale != 1.0 else grad, name=bucket.name,
                                           op=self._op, process_set=self.process_set)

    # ------------------------------------------------------------------------------------- after backward

    def synchronize(self):
        """Waits for every gradient's all-reduce (starting those not started yet) and writes the averaged
        gradients into ``p.grad``. Call it before clipping, then ``step()`` inside ``skip_synchronize()``. With
        Adasum there is nothing to wait for: gradients stay local and ``step()`` combines the steps."""
        if not self.process_set.included() or self._adasum:
            self._synchronized = True
            return
        for bucket in self._buckets:
            if bucket.work is None:
                self._submit(bucket)
        error = None
        on_gpu = {}  # device -> its prepared gradients' handles, released once its current stream waits for them
        for bucket in self._buckets:
            try:
                if bucket.take is not None:
                    bucket.take(bucket)
                elif bucket.placement is not None:  # reduced in place on a GPU
                    on_gpu.setdefault(bucket.params[0].grad.device, []).append(bucket.work)
                    bucket.work.wait()  # the NCCL work is enqueued (raises what the core refused)
                else:  # reduced in place in host memory
                    bucket.work.finish()  # waits, then releases even when it raises
            except Exception as e:  # wait for every bucket so nothing stays in flight; raise the first error
                error = error or e
            bucket.work, bucket.take, bucket.contexts = None, None, None
            bucket.ready.clear()
        for device, handles in on_gpu.items():
            try:
                if error is None:  # the optimizer's step reads the gradients after the all-reduces wrote them
                    gpu_path.order_after(handles, device)
            except Exception as e:
                error = e
            finally:
                release_all(handles)
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        if error is not None:
            raise error
        self._synchronized = True

    def _take_sparse(self, bucket):
        """The reduced sparse gradient replaces the bucket's."""
        p = bucket.params[0]
        p.grad = bucket.work() * (self._gradient_predivide_factor if self._op == Average else 1.0)

    def _take_decompressed(self, bucket):
        """The reduced (compressed) gradients, decompressed, back into the parameters' gradients."""
        bucket.work.finish()
        compressed, contexts = bucket.contexts
        for p, reduced, ctx in zip(bucket.params, compressed, contexts):
            grad = self._compression.decompress(reduced, ctx)
            if p in bucket.sparse:
                p.grad = grad.to_sparse()
            elif grad is not p.grad:
                p.grad.copy_(grad)

    def _in_flight(self):
        """How many gradient all-reduces were started and not yet synchronized (for tests)."""
        return sum(bucket.work is not None for bucket in self._buckets)

    @contextmanager
    def skip_synchronize(self):
        """Within this context ``step()`` does not synchronize (use after an explicit ``synchronize()``)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._adasum:
            return self._adasum_step(closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). The gradients are already synchronized; use "
                              "optimizer.skip_synchronize() around step() when you call synchronize() yourself.")
            else:
                self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def _adasum_step(self, closure):
        """Horovod's Adasum optimizer: each rank takes the wrapped optimizer's step on its own gradients, and the
        ranks' parameter changes are combined by an Adasum all-reduce (fused; coefficients per parameter) and
        applied to the parameters as they were before the step. Unlike Horovod, which steps each parameter from
        zero to read off its change, the change is measured, so weight decay and other terms that depend on the
        parameter itself count too."""
        params = [p for b in self._buckets for p in b.params]
        if not self.process_set.included() or self.process_set.size() == 1:
            return super().step(closure)
        with torch.no_grad():
            starts = [p.detach().clone() for p in params]
        loss = super().step(closure)
        with torch.no_grad():
            deltas = [p.detach() - start for p, start in zip(params, starts)]
            compressed, contexts = zip(*[self._compression.compress(d) for d in deltas]) if deltas else ((), ())
            reduced = _synchronize_handle(aops.grouped_allreduce_async_(
                list(compressed), name="DistributedOptimizer.adasum", op=Adasum, process_set=self.process_set))
            for p, start, r, ctx in zip(params, starts, reduced, contexts):
                p.copy_(start + self._compression.decompress(r, ctx))
        return loss

    def zero_grad(self, set_to_none=True):
        if any(b.work is not None or b.ready for b in self._buckets) or any(
                d != self.backward_passes_per_step for d in self._delay.values()):
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                                 "a race condition.")
        return super().zero_grad(set_to_none=set_to_none)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate locally before the gradients are all-reduced."""
        if passes < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes


_classes = {}


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wraps a ``torch.optim.Optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    Returns an optimizer of the wrapped class (``isinstance(opt, torch.optim.SGD)`` still holds) sharing the
    wrapped one's parameter groups, state and hyper-parameters.

    Arguments (as in Horovod):
        named_parameters: ``model.named_parameters()``; names identify gradients across ranks. Duplicate names,
            or parameters of the optimizer left unnamed, raise ValueError.
        compression: ``Compression.none``, ``.fp16`` or ``.bf16`` for the all-reduces.
        backward_passes_per_step: backward passes accumulated locally before each all-reduce.
        op: ``Average`` (default) or ``Sum`` (Min/Max/Product too); ``Adasum`` combines each rank's optimizer step
            instead of averaging gradients (a power-of-two number of ranks, as in Horovod).
        gradient_predivide_factor: with Average, divide by this before the sum and by size/factor after.
        num_groups / groups: an int number of groups, or a list of lists of parameters, whose gradients are
            all-reduced together once every member's gradient is ready.
        sparse_as_dense: turn sparse gradients dense before reducing (else they are gathered as sparse).
        process_set: the ranks that average gradients together.
    """
    if num_groups and groups is None:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=2)
        groups = num_groups
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("the optimizer is already a DistributedOptimizer; wrap the plain torch optimizer once")
    base = optimizer.__class__
    cls = _classes.get(base)
    if cls is None:
        cls = type(base.__name__, (_DistributedOptimizer, base), {"__module__": base.__module__})
        _classes[base] = cls
    distributed = cls.__new__(cls)
    # Share the wrapped optimizer's attributes, except instance attributes that shadow methods (an LR
    # scheduler created before wrapping replaces `optimizer.step` on the instance with a bound wrapper).
    distributed.__dict__.update({key: value for key, value in optimizer.__dict__.items()
                                 if not (callable(value) and hasattr(cls, key))})
    distributed._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                           gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return distributed
