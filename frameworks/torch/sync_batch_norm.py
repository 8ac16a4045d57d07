"""SyncBatchNorm: batch normalisation with statistics over the whole global batch, not each rank's slice.

Forward: every rank gathers (count, mean, centred sum of squares) per channel from every rank and combines them
exactly (Chan et al.'s parallel variance), so the result equals BatchNorm on the concatenated batch.
Backward: the two per-channel sums that couple the samples (sum of dy, sum of dy * x_hat) are all-reduced;
the weight and bias gradients stay local, as the DistributedOptimizer averages them.
"""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hvdlite.process_sets import global_process_set

from .async_ops import Sum, allgather_async, allreduce_async
from .handles import synchronize


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous batch normalisation over (N, C, ...) inputs, like ``torch.nn.BatchNorm*d``.

    In training mode the statistics are those of the batch of every rank of ``process_set`` together; in eval
    mode the running statistics are used, as in ``BatchNorm``.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats or self.process_set.size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                use_batch_stats, factor, self.eps)
        running_mean = self.running_mean if self.training else None
        running_var = self.running_var if self.training else None
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean, running_var, self.eps,
                                            factor, self.process_set)


def _channel_view(t, ndim):
    return t.view((1, -1) + (1,) * (ndim - 2))


class _SyncBatchNormFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xd = x.detach().to(torch.float64)
        count = x.numel() // channels
        if count:
            mean = xd.mean(dims)
            m2 = ((xd - _channel_view(mean, x.dim())) ** 2).sum(dims)
        else:
            mean = m2 = xd.new_zeros(channels)
        local = torch.cat([xd.new_tensor([count]), mean, m2]).unsqueeze(0)
        stats = synchronize(allgather_async(local, process_set=process_set))
        counts, means, m2s = stats[:, 0], stats[:, 1:1 + channels], stats[:, 1 + channels:]
        total = counts.sum()
        if total <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got {int(total)}")
        global_mean = (counts[:, None] * means).sum(0) / total
        global_m2 = (m2s + counts[:, None] * (means - global_mean) ** 2).sum(0)
        var = global_m2 / total
        invstd = torch.rsqrt(var + eps)

        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_((global_m2 / (total - 1)).to(running_var.dtype),
                                                    alpha=momentum)

        x_hat = (xd - _channel_view(global_mean, x.dim())) * _channel_view(invstd, x.dim())
        y = x_hat
        if weight is not None:
            y = y * _channel_view(weight.detach().to(torch.float64), x.dim())
        if bias is not None:
            y = y + _channel_view(bias.detach().to(torch.float64), x.dim())
        ctx.save_for_backward(x_hat, invstd, weight)
        ctx.args = (process_set, float(total), bias is not None)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x_hat, invstd, weight = ctx.saved_tensors
        process_set, total, has_bias = ctx.args
        dims = [0] + list(range(2, grad_output.dim()))
        dy = grad_output.to(torch.float64)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * x_hat).sum(dims)
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy.to(weight.dtype if weight is not None else grad_output.dtype) \
            if has_bias and ctx.needs_input_grad[2] else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            sums = synchronize(allreduce_async(torch.cat([sum_dy, sum_dy_xhat]), op=Sum, process_set=process_set))
            channels = sum_dy.numel()
            mean_dy = _channel_view(sums[:channels] / total, dy.dim())
            mean_dy_xhat = _channel_view(sums[channels:] / total, dy.dim())
            scale = invstd if weight is None else invstd * weight.detach().to(torch.float64)
            grad_input = (_channel_view(scale, dy.dim()) * (dy - mean_dy - x_hat * mean_dy_xhat))
            grad_input = grad_input.to(grad_output.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
