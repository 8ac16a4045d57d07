"""A state's tensors copied into host memory (an elastic commit): from the CPU in one call, from a GPU in one
transfer.

From a GPU, a copy per tensor costs a launch each, some microseconds, most of a small model's commit. So the
tensors are first gathered into one GPU buffer by one multi-tensor copy, at the offsets their host copies have
from each other, and that buffer goes to the host in one copy, into page-locked memory where it can (a direct
transfer at the link's rate), then one wait. The GPU buffer is a second copy of the state on the GPU: it is used
up to GATHER_LIMIT bytes; above, the launches are a small part of the transfer, and the tensors are copied one by
one, all started before one wait.
"""
import ctypes
import math

import numpy as np
import torch

from hvdlite.elastic.commit_body import layout

GATHER_LIMIT = 64 << 20


def _typed(buffer, offset, dtype, shape):
    """A tensor of dtype and shape over the bytes of buffer (a 1-D uint8 tensor) from offset."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return buffer[offset:offset + nbytes].view(dtype).view(shape)


class HostCopies:
    """Where a state's tensors are copied on the host: ``views``, CPU tensors of their dtypes and shapes lying in one
    range of host memory that something else keeps alive (a memory slot, or the buffer of ``allocate``).
    ``gather`` is a dict shared by the copies of one state: the GPU buffer they gather into, one per GPU."""

    def __init__(self, views, gather):
        self.views = views
        spans = [(v.data_ptr(), v.data_ptr() + v.nbytes) for v in views if v.nbytes]
        self.start = min((begin for begin, _ in spans), default=0)
        self.size = max((end for _, end in spans), default=0) - self.start
        self._key = tuple((v.dtype, v.shape, v.data_ptr() - self.start) for v in views)
        self._gather = gather
        self._host = None  # the range as one uint8 tensor, made when first needed

    @classmethod
    def allocate(cls, tensors, gather):
        """New host copies for tensors, in one buffer laid out as a memory slot lays them out (page-locked where
        any of them is on a GPU)."""
        offsets, end = layout([t.nbytes for t in tensors])
        base = offsets[0] if offsets else 0
        buffer = torch.empty(max(end - base, 1), dtype=torch.uint8, pin_memory=any(t.is_cuda for t in tensors))
        return cls([_typed(buffer, offset - base, t.dtype, t.shape) for t, offset in zip(tensors, offsets)], gather)

    def fits(self, tensors):
        return len(tensors) == len(self.views) and all(
            v.dtype == t.dtype and v.shape == t.shape for v, t in zip(self.views, tensors))

    def copy_from(self, tensors):
        """Copies tensors (of the views' dtypes and shapes) into the views; returns when they are there."""
        gpus = {t.device for t in tensors if t.device.type == "cuda"}
        if not gpus:
            torch._foreach_copy_(self.views, tensors)
            return
        if len(gpus) == 1 and 0 < self.size <= GATHER_LIMIT:
            (gpu,) = gpus
            staging, staged = self._gathering(gpu)
            on_gpu = [t.device == gpu for t in tensors]
            torch._foreach_copy_([s for s, here in zip(staged, on_gpu) if here],
                                 [t for t, here in zip(tensors, on_gpu) if here])
            self._host_bytes().copy_(staging, non_blocking=True)
            torch.cuda.current_stream(gpu).synchronize()
            # The others (Adam keeps its step counts on the CPU) after the transfer, which covered their places too.
            for view, t, here in zip(self.views, tensors, on_gpu):
                if not here:
                    view.copy_(t)
            return
        for view, t in zip(self.views, tensors):
            view.copy_(t, non_blocking=t.device.type == "cuda")
        for gpu in gpus:
            torch.cuda.current_stream(gpu).synchronize()

    def _gathering(self, device):
        """(the GPU buffer, its views at the host copies' offsets), made once for this layout and GPU."""
        key, staging, staged = self._gather.get(device, (None, None, None))
        if key != self._key:
            staging = torch.empty(self.size, dtype=torch.uint8, device=device)
            staged = [_typed(staging, offset, dtype, shape) for dtype, shape, offset in self._key]
            self._gather[device] = self._key, staging, staged
        return staging, staged

    def _host_bytes(self):
        if self._host is None:
            self._host = torch.from_numpy(np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(self.start)))
        return self._host
