"""``hvd.elastic`` for PyTorch: TorchState and ElasticSampler, with ``run``, ``ObjectState`` and the errors.

TorchState commits the model's and the optimizer's state dicts (copies, so a commit is the state of that moment:
on the CPU, or on the GPU where the tensors are, elastic_gpu.py), any ElasticSampler given to it (its epoch and how many samples the job has processed), and other
values as attributes, like ObjectState. A state dict is kept as its structure with the tensors taken out
(_flatten) and the flat list of tensors, so that a commit copies the tensors in one call: on the rank that writes
the host's copy straight into its memory slot (commits.memory_arrays), on the others into the last commit's
buffers; their arrays are pickled as one block (ArrayBlock). Every tensor's place in the structure is the same
marker, TENSOR, and the tensors are put back in the order the structure is walked: pickled, each place is then
a reference to one global instead of an object of its own (a commit pickles the structure every time).
"""
import copy
import functools
import math
import random

import torch

from hvdlite import basics
from hvdlite.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, commits, run  # noqa: F401
from hvdlite.elastic.array_block import ArrayBlock

from .elastic_gpu import DeviceCopy
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class _TensorPlace:
    """The marker of a tensor's place in a state dict's structure (one instance, TENSOR)."""

    __slots__ = ()

    def __reduce__(self):
        return "TENSOR"  # pickled as a reference to this module's global


TENSOR = _TensorPlace()
_PLAIN = frozenset((int, float, bool, str, bytes, type(None), torch.dtype))  # kept as they are, not copied
_Tensor = torch.Tensor


def _taken(tensor, tensors):
    """TENSOR, with ``tensor`` (detached) appended to ``tensors``."""
    tensors.append(tensor.detach() if tensor.requires_grad else tensor)
    return TENSOR


def _flatten(value, tensors):
    """value (state dicts: dicts, lists and tuples of tensors and plain values) with its tensors appended to
    ``tensors`` and replaced by TENSOR; containers are new, other mutable values copied. Plain values and tensors
    are taken in line: a commit walks the model's every tensor and the optimizer's every setting."""
    if isinstance(value, _Tensor):
        return _taken(value, tensors)
    if isinstance(value, dict):
        flat = type(value)()
        for k, v in value.items():
            if type(v) in _PLAIN:
                flat[k] = v
            elif isinstance(v, _Tensor):  # a model's state dict: name -> tensor, without a recursion each
                flat[k] = _taken(v, tensors)
            else:
                flat[k] = _flatten(v, tensors)
        return flat
    if isinstance(value, (list, tuple)):
        return type(value)([v if type(v) in _PLAIN else _flatten(v, tensors) for v in value])
    return value if type(value) in _PLAIN else copy.deepcopy(value)


def _unflatten(skeleton, tensors):
    """The structure with its TENSOR places filled from the iterator ``tensors``, in _flatten's order."""
    if skeleton is TENSOR:
        return next(tensors)
    if isinstance(skeleton, dict):
        return type(skeleton)((k, _unflatten(v, tensors)) for k, v in skeleton.items())
    if isinstance(skeleton, (list, tuple)):
        return type(skeleton)([_unflatten(v, tensors) for v in skeleton])
    return skeleton


def _as_array(tensor):
    """A NumPy view of a tensor's CPU data (a copy where it is on a GPU); bfloat16 as int16."""
    tensor = tensor.cpu()
    return (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()


def _as_tensors(snapshot):
    """The tensors of a snapshot, views of its arrays."""
    tensors = [torch.from_numpy(a) for a in snapshot["arrays"].arrays]
    for i in snapshot["bfloat16"]:
        tensors[i] = tensors[i].view(torch.bfloat16)
    return tensors


def _on_cpu(tensors):
    return all(t.device.type == "cpu" for t in tensors)


def _copy_into(saved, tensors):
    """Copies of CPU tensors, written into ``saved`` (the copies of the last save) where they still fit: saving
    every step allocates nothing."""
    if saved is None or len(saved) != len(tensors) or any(
            s.shape != t.shape or s.dtype != t.dtype for s, t in zip(saved, tensors)):
        saved = [torch.empty(t.shape, dtype=t.dtype) for t in tensors]
    torch._foreach_copy_(saved, tensors)
    return saved


@functools.lru_cache(maxsize=None)
def _numpy_dtype(dtype):
    """The NumPy dtype string of a torch dtype's arrays (_as_array: bfloat16 as int16)."""
    return _as_array(torch.empty(0, dtype=dtype)).dtype.str


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's elastic sampler: this rank's share of the dataset's (shuffled) indices, resuming mid-epoch.

    The job's progress through an epoch is ``processed_num`` samples of one global order (shuffled by
    ``seed + epoch``); after a restart, and on any number of ranks, the rest of the epoch is dealt out again,
    so no sample is repeated or skipped. Call ``record_batch(batch_idx, batch_size)`` after each batch and
    ``set_epoch(epoch)`` at the start of each epoch.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of ``batch_size`` on every rank as processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Counts this rank's ``indices`` (and the same number on every other rank) as processed."""
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        self.num_replicas = basics.size() if basics.is_initialized() else 1
        self.rank = basics.rank() if basics.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.epoch_indices = order
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Padded (so that every rank gets num_samples) from the start of the epoch's order, not of what remains:
        # an epoch resumed on as many ranks then pads as the uninterrupted one would have.
        indices += self.epoch_indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


class _InMemory:
    """A state's tensors' place in one memory slot: their dtypes and shapes (and NumPy's), the slot's arrays (as an
    ArrayBlock, pickled the same way every commit) and tensors viewing them."""

    __slots__ = ("layout", "specs", "arrays", "block", "views")

    def __init__(self, layout, specs, arrays):
        self.layout, self.specs, self.arrays, self.block = layout, specs, arrays, ArrayBlock(arrays)
        self.views = [torch.from_numpy(a).view(dtype) for a, (dtype, _) in zip(arrays, layout)]


class TorchState(ObjectState):
    """``TorchState(model=None, optimizer=None, **kwargs)``: the model's and optimizer's state, ElasticSamplers
    and other values given as keyword arguments (``state.epoch``, ``state.batch``, ...)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._samplers = {name: value for name, value in kwargs.items() if isinstance(value, ElasticSampler)}
        values = {name: value for name, value in kwargs.items() if name not in self._samplers}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        # The saved copy: the state dicts with their tensors taken out (_TensorAt), and those tensors on the CPU,
        # reused by the next save.
        self._saved_dicts = {"model": None, "optimizer": None}
        self._saved_tensors = None
        self._saved_samplers = {}
        self._saved_sequence = None  # the commit in the host's memory that is the saved copy, if it is there
        self._in_memory = {}  # sequence % 2 -> _InMemory: where the tensors of a commit to that slot go
        self._device_copy = None  # the saved copy where tensors are on GPUs (a DeviceCopy; its tensors are saved)
        self._walked = None  # (dicts, tensors) read by live_snapshot for the save of the same commit
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **values)

    def _live_dicts(self, tensors):
        return {"model": _flatten(self.model.state_dict(), tensors) if self.model is not None else None,
                "optimizer": _flatten(self.optimizer.state_dict(), tensors) if self.optimizer is not None else None}

    def save(self):
        self._saved_sequence = None
        walked, self._walked = self._walked, None
        tensors = walked[1] if walked else []
        self._saved_dicts = walked[0] if walked else self._live_dicts(tensors)
        if _on_cpu(tensors):
            self._device_copy = None
            self._saved_tensors = _copy_into(self._saved_tensors, tensors)
        else:
            commits.wait_filled()  # the host's writer: the last commit may still be read from the GPU copy
            self._device_copy = DeviceCopy.reused(self._device_copy, tensors, gathered=commits.writes_here())
            self._device_copy.copy_from(tensors)
            self._saved_tensors = self._device_copy.tensors
        self._saved_samplers = {name: s.state_dict() for name, s in self._samplers.items()}
        super().save()

    def restore(self):
        if self._saved_sequence is not None:
            self._take_saved(commits.read_memory(self._saved_sequence)["state"])
        if self._saved_tensors is not None:
            # Copies: optimizer.load_state_dict keeps the tensors it is given, and the next save writes into these.
            tensors = iter([t.clone() for t in self._saved_tensors])
            dicts = {name: _unflatten(self._saved_dicts[name], tensors) for name in ("model", "optimizer")}
            for name, target in (("model", self.model), ("optimizer", self.optimizer)):
                if target is not None and dicts[name] is not None:
                    target.load_state_dict(dicts[name])
        for name, saved in self._saved_samplers.items():
            self._samplers[name].load_state_dict(saved)
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        for sampler in self._samplers.values():
            sampler.load_state_dict(broadcast_object(sampler.state_dict(), root_rank=0))
        super().sync()

    @staticmethod
    def _snapshot_of(dicts, tensors, block=None):
        """The snapshot of state dicts whose tensors are ``tensors``: their arrays are ``block`` where given (the
        tensors copied into the host's memory), else views of the tensors (copies of GPU ones)."""
        return {"dicts": dicts, "arrays": block if block is not None else ArrayBlock([_as_array(t) for t in tensors]),
                "bfloat16": [i for i, t in enumerate(tensors) if t.dtype == torch.bfloat16]}

    def snapshot(self):
        if self._saved_sequence is not None:  # the saved copy is the commit in the host's memory
            return commits.read_memory(self._saved_sequence)["state"]
        return {**self._snapshot_of(self._saved_dicts, self._saved_tensors or []),
                "samplers": self._saved_samplers, "values": super().snapshot()}

    def live_snapshot(self):
        tensors = []
        dicts = self._live_dicts(tensors)
        if not _on_cpu(tensors):  # saved on the GPU and written from there (write_saved)
            self._walked = (dicts, tensors)
            return None
        return {**self._snapshot_of(dicts, tensors, self._copied_to_memory(tensors)),
                "samplers": {name: s.state_dict() for name, s in self._samplers.items()},
                "values": {name: getattr(self, name) for name in self._saved_state}}

    def _copied_to_memory(self, tensors):
        """The ArrayBlock of the arrays in this host's memory slot for this commit, with ``tensors`` copied into them
        (in one call), or None where commits do not go to memory."""
        layout = tuple((t.dtype, t.shape) for t in tensors)
        place = self._in_memory.get(self._sequence % 2)
        if place is not None and place.layout != layout:
            place = None
        specs = place.specs if place is not None else tuple((_numpy_dtype(d), tuple(shape)) for d, shape in layout)
        arrays = commits.memory_arrays(self._sequence, specs)
        if arrays is None:
            return None
        if place is None or place.arrays is not arrays:
            place = self._in_memory[self._sequence % 2] = _InMemory(layout, specs, arrays)
        torch._foreach_copy_(place.views, tensors)
        return place.block

    def write_saved(self):
        copy = self._device_copy
        if copy is None:
            return super().write_saved()
        specs = tuple((_numpy_dtype(dtype), tuple(shape)) for dtype, shape, _ in copy.layout)
        place = commits.memory_arrays(self._sequence, specs, span=True)
        if place is None:  # no memory slot: written in line
            return super().write_saved()
        arrays, span = place
        snapshot = {**self._snapshot_of(self._saved_dicts, copy.tensors, copy.block_of(arrays)),
                    "samplers": self._saved_samplers, "values": self._saved_state}
        commits.write_filled_later(self._sequence, self._payload(snapshot), copy.fill(arrays, span))

    def saved_in_memory(self, sequence):
        self._saved_sequence = sequence

    def load_snapshot(self, snapshot):
        self._take_saved(snapshot)
        self.restore()

    def _take_saved(self, snapshot):
        """Makes snapshot (as snapshot() returns it) the saved copy, without applying it."""
        self._saved_sequence = None
        self._device_copy = None
        self._saved_dicts = snapshot["dicts"]
        self._saved_tensors = _as_tensors(snapshot)
        self._saved_samplers = snapshot["samplers"]
        self._saved_state = dict(snapshot["values"])
