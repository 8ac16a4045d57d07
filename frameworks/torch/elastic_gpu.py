"""A TorchState's saved copy when its tensors live on a GPU: kept on the GPU, as Horovod keeps it, and on the rank
that writes its host's commits also moved into the host's memory slot, in the background.

Saving copies the tensors within the GPU's memory, on the current stream after the step's work, with nothing
waited for on the host: a commit costs the step about what Horovod's does. On the host's writer the copies lie in
one buffer on the GPU laid out as the memory slot lays out its arrays (commit_body.layout), so the commit filler's
thread (hvdlite/elastic/filler.py) moves them into the slot, page-locked (pinned_memory.py), in one transfer, on a
stream of its own: it waits for the copies' event, not for the device, and the transfer runs beside the next
step's kernels. Tensors that are on
the CPU (Adam's step counts) are copied on the CPU and written into the slot after the transfer. A rank whose
tensors are on several GPUs moves them one by one.
"""
import torch

from hvdlite.elastic import commit_body
from hvdlite.elastic.array_block import ArrayBlock

from . import pinned_memory


class DeviceCopy:
    """Copies of a list of tensors (``tensors``), each on the device of the one it copies; ``gathered``: the GPU
    ones inside one buffer laid out as a memory slot's arrays (for the host's writer)."""

    def __init__(self, tensors, gathered):
        self.layout = tuple((t.dtype, t.shape, t.device) for t in tensors)
        self.gathered = gathered
        devices = {t.device for t in tensors if t.device.type == "cuda"}
        self.buffer = None  # the one buffer of the GPU copies, when gathered
        if gathered and len(devices) == 1:
            device, = devices
            offsets, end = commit_body.layout([t.numel() * t.element_size() for t in tensors])
            start = offsets[0]
            self.buffer = torch.empty(end - start, dtype=torch.uint8, device=device)
            self.tensors = [self.buffer[o - start:o - start + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
                            if t.device == device else torch.empty(t.shape, dtype=t.dtype)
                            for t, o in zip(tensors, offsets)]
        else:
            self.tensors = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors]
        self._groups = {}  # device -> (indices of its tensors): one multi-tensor copy each
        for index, t in enumerate(tensors):
            self._groups.setdefault(t.device, []).append(index)
        self._events = {device: torch.cuda.Event() for device in devices}
        self._streams = {device: torch.cuda.Stream(device) for device in devices}  # the transfers' own
        self._blocks = []  # (a slot's arrays, their ArrayBlock), for the two slots: made once each

    @classmethod
    def reused(cls, copy, tensors, gathered):
        """``copy`` where it fits ``tensors`` (same dtypes, shapes, devices; gathered alike), else a new one."""
        if copy is not None and copy.gathered == gathered and copy.layout == tuple(
                (t.dtype, t.shape, t.device) for t in tensors):
            return copy
        return cls(tensors, gathered)

    def copy_from(self, tensors):
        """Copies ``tensors`` in: one multi-tensor copy per device, on its current stream; an event after each GPU's
        (the filler waits for it). The caller has made sure no transfer still reads these copies
        (commits.wait_filled)."""
        for device, indices in self._groups.items():
            torch._foreach_copy_([self.tensors[i] for i in indices], [tensors[i] for i in indices])
            if device.type == "cuda":
                self._events[device].record(torch.cuda.current_stream(device))

    def fill(self, arrays, span):
        """A function that writes these copies into a memory slot's ``arrays`` (numpy, as
        commits.memory_arrays(..., span=True) gave them with their ``span``), for the filler's thread."""
        targets = [torch.from_numpy(a).view(dtype) for a, (dtype, _, _) in zip(arrays, self.layout)]
        on_gpu = {device: indices for device, indices in self._groups.items() if device.type == "cuda"}
        on_cpu = [i for device, indices in self._groups.items() if device.type != "cuda" for i in indices]
        whole = None
        if self.buffer is not None:
            pinned_memory.lock(span)  # one direct transfer at the link's rate
            whole = torch.from_numpy(span)

        def fill():
            for device, indices in on_gpu.items():
                stream = self._streams[device]
                with torch.cuda.device(device), torch.cuda.stream(stream):
                    stream.wait_event(self._events[device])
                    # Into pageable memory a copy returns once it is done.
                    if whole is not None:
                        whole.copy_(self.buffer)
                    else:
                        for i in indices:
                            targets[i].copy_(self.tensors[i])
            for i in on_cpu:  # after the gathered transfer, which writes their places too
                targets[i].copy_(self.tensors[i])
        return fill

    def block_of(self, arrays):
        """The ArrayBlock of a slot's ``arrays``: the same for the same arrays, so pickled the same way again."""
        for held, block in self._blocks:
            if held is arrays:
                return block
        self._blocks = [*self._blocks[-1:], (arrays, ArrayBlock(arrays))]
        return self._blocks[-1][1]
