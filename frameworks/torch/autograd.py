"""Autograd functions for the collectives, with Horovod's gradient conventions for PyTorch.

With y = post * op_j(pre * x_j) and dL/dy this rank's incoming gradient:
- allreduce Sum/Average: dL/dx_i = allreduce(dL/dy, same op and scale factors);
- allreduce Min/Max: the gradient flows to the ranks holding the extreme (split evenly among ties);
- allreduce Product: dL/dx_i = sum_j dL/dy_j * post * pre * prod_{k != i}(pre * x_k);
- allgather: this rank's rows of the *average* over ranks of dL/dy;
- broadcast: the average over ranks of dL/dy on the root, zero elsewhere;
- alltoall: an alltoall of the gradient back along the received splits;
- reducescatter Sum: the allgather of dL/dy times the set's size; Average: the allgather of dL/dy; other ops
  take the allreduce rule on the zero-padded gradient.
The averages (and the reducescatter's factor) are Horovod's: they treat every rank's incoming gradient as one
rank's share of an averaged loss, so that the optimizer's averaging of gradients stays the only averaging.
Backward collectives are named after the forward name when there is one, else auto-named (ranks run backward in
the same order, so the names agree).
"""
import torch

from hvdlite import basics
from hvdlite.requests import Collective, output_first_dim

from . import async_ops as aops
from .async_ops import Average, Max, Min, Product, Sum
from .handles import synchronize


def _derived(name, suffix):
    return None if name is None else f"{name}.{suffix}"


def _contiguous(grad):
    return grad if grad.is_contiguous() else grad.contiguous()


def allreduce_grad(x, grad, op, prescale, postscale, process_set, name):
    """This rank's dL/dx for y = postscale * op(prescale * x) over the set, given this rank's dL/dy."""
    grad = _contiguous(grad)
    if op in (Sum, Average):
        return synchronize(aops.allreduce_async(grad, name=_derived(name, "grad"), op=op,
                                                prescale_factor=prescale, postscale_factor=postscale,
                                                process_set=process_set))
    z = x.detach() * prescale
    grad_sum = synchronize(aops.allreduce_async(grad, name=_derived(name, "grad"), op=Sum,
                                                process_set=process_set))
    if op in (Min, Max):
        extreme = synchronize(aops.allreduce_async(z, name=_derived(name, "grad.extreme"), op=op,
                                                   process_set=process_set))
        mask = (z == extreme).to(grad.dtype)
        ties = synchronize(aops.allreduce_async(mask, name=_derived(name, "grad.ties"), op=Sum,
                                                process_set=process_set))
        return mask * grad_sum * (prescale * postscale) / ties
    if op == Product:
        gathered = synchronize(aops.allgather_async(z.unsqueeze(0), name=_derived(name, "grad.factors"),
                                                    process_set=process_set))
        r = process_set.rank()
        others = torch.cat([gathered[:r], gathered[r + 1:]]).prod(dim=0)
        return grad_sum * others * (prescale * postscale)
    raise ValueError(f"no gradient for reduce op {op!r}")


class HorovodAllreduce(torch.autograd.Function):
    """Differentiable allreduce."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        if op not in (Sum, Average):
            ctx.save_for_backward(tensor)
        return synchronize(aops.allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                                postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        name, op, pre, post, process_set = ctx.args
        x = ctx.saved_tensors[0] if ctx.saved_tensors else None
        return allreduce_grad(x, grad_output, op, pre, post, process_set, name), None, None, None, None, None


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Differentiable grouped allreduce: ``apply(name, op, pre, post, process_set, *tensors)``."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        if op not in (Sum, Average):
            ctx.save_for_backward(*tensors)
        return tuple(synchronize(aops.grouped_allreduce_async(
            tensors, name=name, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
            process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post, process_set = ctx.args
        if op in (Sum, Average):
            result = synchronize(aops.grouped_allreduce_async(
                [_contiguous(g) for g in grads], name=_derived(name, "grad"), op=op, prescale_factor=pre,
                postscale_factor=post, process_set=process_set))
        else:
            result = [allreduce_grad(x, g, op, pre, post, process_set, _derived(name, str(i)))
                      for i, (x, g) in enumerate(zip(ctx.saved_tensors, grads))]
        return (None,) * 5 + tuple(result)


def _allgather_grad(dim0, grad, process_set, name):
    """This rank's rows of the average over ranks of dL/d(gathered)."""
    sizes = synchronize(aops.allgather_async(torch.tensor([dim0], dtype=torch.int64),
                                             name=_derived(name, "grad.sizes"), process_set=process_set))
    offset = int(sizes[:process_set.rank()].sum())
    averaged = synchronize(aops.allreduce_async(_contiguous(grad), name=_derived(name, "grad"), op=Average,
                                                process_set=process_set))
    return averaged.narrow(0, offset, dim0)


class HorovodAllgather(torch.autograd.Function):
    """Differentiable allgather along dimension 0."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.args = (tensor.shape[0] if tensor.dim() else 1, name, process_set)
        return synchronize(aops.allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        dim0, name, process_set = ctx.args
        return _allgather_grad(dim0, grad_output, process_set, name), None, None


class HorovodGroupedAllgather(torch.autograd.Function):
    """Differentiable grouped allgather: ``apply(name, process_set, *tensors)``."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.args = ([t.shape[0] for t in tensors], name, process_set)
        return tuple(synchronize(aops.grouped_allgather_async(tensors, name=name, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        dims, name, process_set = ctx.args
        return (None, None) + tuple(_allgather_grad(d, g, process_set, _derived(name, str(i)))
                                    for i, (d, g) in enumerate(zip(dims, grads)))


class HorovodBroadcast(torch.autograd.Function):
    """Differentiable broadcast."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.args = (root_rank, name, process_set)
        return synchronize(aops.broadcast_async(tensor, root_rank, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        root_rank, name, process_set = ctx.args
        averaged = synchronize(aops.allreduce_async(_contiguous(grad_output), name=_derived(name, "grad"),
                                                    op=Average, process_set=process_set))
        if basics.rank() != root_rank:  # roots are global ranks
            averaged = torch.zeros_like(averaged)
        return averaged, None, None, None


class HorovodAlltoall(torch.autograd.Function):
    """Differentiable alltoall; returns ``(output, received_splits)``, the splits not differentiable."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(aops.alltoall_async(tensor, splits=splits, name=name,
                                                           process_set=process_set))
        ctx.args = (received, name, process_set)
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        received, name, process_set = ctx.args
        grad, _ = synchronize(aops.alltoall_async(_contiguous(grad_output), splits=received,
                                                  name=_derived(name, "grad"), process_set=process_set))
        return grad, None, None, None


def _reducescatter_grad(x, shape, grad, op, pre, post, process_set, name):
    if op in (Sum, Average):
        gathered = synchronize(aops.allgather_async(_contiguous(grad), name=_derived(name, "grad"),
                                                    process_set=process_set))
        scale = pre * post * (process_set.size() if op == Sum else 1)
        return gathered if scale == 1 else gathered * scale
    # reducescatter(x) is this rank's block of allreduce(x): pad the gradient to the full shape.
    offset = sum(output_first_dim(Collective.REDUCESCATTER, shape[0], process_set.size(), r)
                 for r in range(process_set.rank()))
    padded = grad.new_zeros(shape)
    padded.narrow(0, offset, grad.shape[0]).copy_(grad)
    return allreduce_grad(x, padded, op, pre, post, process_set, name)


class HorovodReducescatter(torch.autograd.Function):
    """Differentiable reducescatter."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (tuple(tensor.shape), name, op, process_set, prescale_factor, postscale_factor)
        if op not in (Sum, Average):
            ctx.save_for_backward(tensor)
        return synchronize(aops.reducescatter_async(tensor, name=name, op=op, process_set=process_set,
                                                    prescale_factor=prescale_factor,
                                                    postscale_factor=postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        shape, name, op, process_set, pre, post = ctx.args
        x = ctx.saved_tensors[0] if ctx.saved_tensors else None
        return _reducescatter_grad(x, shape, grad_output, op, pre, post, process_set, name), \
            None, None, None, None, None


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Differentiable grouped reducescatter: ``apply(name, op, process_set, pre, post, *tensors)``."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = ([tuple(t.shape) for t in tensors], name, op, process_set, prescale_factor, postscale_factor)
        if op not in (Sum, Average):
            ctx.save_for_backward(*tensors)
        return tuple(synchronize(aops.grouped_reducescatter_async(
            tensors, name=name, op=op, process_set=process_set, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        shapes, name, op, process_set, pre, post = ctx.args
        # Saved tensors are read only where the op needs them: backward runs once per output when the caller
        # calls backward on each output, and a second read of freed saved tensors raises.
        xs = ctx.saved_tensors if op not in (Sum, Average) else [None] * len(grads)
        return (None,) * 5 + tuple(
            _reducescatter_grad(x, s, g, op, pre, post, process_set, _derived(name, str(i)))
            for i, (x, s, g) in enumerate(zip(xs, shapes, grads)))
