"""CUDA tensors through the core's NCCL path (hvdlite.gpu): the core gets device pointers and the current stream,
results stay on the device, and synchronize makes the caller's current stream wait for the collective, without
the host waiting. Where the path does not serve a request (no NCCL, a reduction NCCL has no form for, tensors on
several GPUs), staging.py copies through host memory instead."""
import torch

from hvdlite import gpu
from hvdlite.requests import describe

from . import staging

# The current stream's CUstream address by device index, without making a torch.cuda.Stream object per call
# (what torch's compiled code calls; the optimizer asks once per gradient). The public call where it is absent.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_address(device):
    """The CUstream address of ``device``'s current stream (0: the legacy default stream)."""
    if _current_raw_stream is not None:
        return _current_raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def on_one_gpu(tensors):
    """Whether ``tensors`` are all CUDA tensors of one GPU."""
    return bool(tensors) and all(t.is_cuda and t.device == tensors[0].device for t in tensors)


def serves(tensors, collective, op=0, prescale_factor=1.0, postscale_factor=1.0):
    """Whether the NCCL path runs this request of ``tensors`` (a Collective number or its name; on one GPU; the
    dimensions the collective's description asks for)."""
    if not on_one_gpu(tensors):
        return False
    if any(t.dim() < describe(collective).min_ndim for t in tensors):
        return False
    if any(t.dtype not in staging.CORE_DTYPES for t in tensors):
        return False
    return all(gpu.serves(collective, staging.CORE_DTYPES[t.dtype], op, prescale_factor, postscale_factor)
               for t in tensors)


def placement(tensor):
    """The request's ``gpu`` field: the tensor's GPU and the stream its producers ran on (the current one)."""
    device = tensor.device
    return device.index, current_stream_address(device)


def device_copy(tensor):
    """The tensor itself when contiguous, else a contiguous copy on its device (on the current stream)."""
    tensor = tensor.detach()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def order_after(core_handles, device):
    """Makes the current stream of ``device`` wait for the finished core handles' GPU work."""
    gpu.stream_wait(core_handles, current_stream_address(device))
