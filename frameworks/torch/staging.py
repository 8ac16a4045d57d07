"""Torch tensors <-> what the core takes: host pointers, dtype names and shapes.

The core reads and writes contiguous host memory, except for the GPU tensors that gpu_path.py hands to its NCCL
path. A tensor that is already contiguous on the CPU is handed over as it is; any other (non-contiguous, or on a
GPU where NCCL does not serve the request) is first copied into a contiguous CPU tensor, and results are copied
back to where the caller's tensor lives. These copies are the only hidden costs of the adapter.
"""
import ml_dtypes
import numpy as np
import torch

from hvdlite.requests import DTYPES

# torch's dtype -> the core's name, for every type of the header's enum (named as torch names them).
CORE_DTYPES = {getattr(torch, name): name for name in DTYPES}


REDUCIBLE_DTYPES = frozenset(CORE_DTYPES) - {torch.bool}


def core_dtype(tensor):
    """The core's name for the tensor's dtype; ValueError for types the core does not reduce."""
    try:
        return CORE_DTYPES[tensor.dtype]
    except KeyError:
        raise ValueError(f"Tensor type {tensor.dtype} is not supported by hvdlite; supported: "
                         f"{', '.join(str(d) for d in CORE_DTYPES)}.") from None


def on_host(tensor):
    """True when the core can use the tensor's memory directly: CPU and contiguous."""
    return tensor.is_cpu and tensor.is_contiguous()  # is_cpu: several times cheaper than device.type


def host_array(tensor):
    """A NumPy array viewing a tensor's memory, for the NumPy API's all-reduce, where the core can reduce it there:
    on the CPU, contiguous, at least one dimension and one element, of a dtype the core reduces (bfloat16 as
    ml_dtypes' bfloat16). None for any other tensor, which is staged instead."""
    if not (on_host(tensor) and tensor.dim() and tensor.numel()):
        return None
    if tensor.requires_grad:
        tensor = tensor.detach()  # a third of the view's cost: only where numpy() needs it
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if tensor.dtype not in REDUCIBLE_DTYPES:
        return None
    return tensor.numpy()


def tensor_of(array):
    """The CPU tensor viewing an all-reduce's result array (bfloat16 as ml_dtypes' in NumPy)."""
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def host_copy(tensor):
    """The tensor itself when the core can use its memory, else a contiguous CPU copy of it."""
    if on_host(tensor):
        return tensor
    return tensor.detach().to("cpu", memory_format=torch.contiguous_format).contiguous()


def host_empty(shape, dtype):
    """A contiguous CPU tensor for the core to write into."""
    return torch.empty(tuple(shape), dtype=dtype, device="cpu")


def address(tensor):
    """The address of the tensor's first element (0 for an empty tensor, which the core never reads)."""
    return tensor.data_ptr() if tensor.numel() else 0


def write_back(target, host):
    """Copies a host result into ``target`` when they are different tensors; returns ``target``."""
    if host is not target:
        with torch.no_grad():
            target.copy_(host)
    return target


def to_device(host, like):
    """Moves a host result to the device of the caller's tensor ``like`` (no copy on the CPU)."""
    return host if like.device.type == "cpu" else host.to(like.device)


def tensor_from_core(handle, dtype):
    """Copies the output the core allocated for ``handle`` (allgather, alltoall) into a new CPU tensor."""
    shape = tuple(handle.output_shape())
    out = torch.empty(shape, dtype=dtype)
    if out.numel() == 0:
        return out
    raw = handle.output_buffer()
    src = torch.frombuffer(raw, dtype=torch.uint8)
    out.view(-1).view(torch.uint8).copy_(src)
    return out


def int_list(values, what):
    """Turns splits given as a list, tuple, numpy array or tensor into a list of Python ints."""
    if values is None:
        return None
    if torch.is_tensor(values):
        values = values.detach().cpu().reshape(-1).tolist()
    out = [int(v) for v in values]
    if any(v < 0 for v in out):
        raise ValueError(f"{what} must be non-negative, got {out}")
    return out
