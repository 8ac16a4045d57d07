"""``hvd.elastic`` for PyTorch: TorchState and ElasticSampler, with ``run``, ``ObjectState`` and the errors.

TorchState commits the model's and the optimizer's state dicts (deep copies on the CPU, so a commit is the
state of that moment), any ElasticSampler given to it (its epoch and how many samples the job has processed),
and other values as attributes, like ObjectState.
"""
import copy
import math
import random

import numpy as np
import torch

from hvdlite import basics
from hvdlite.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, commits, run  # noqa: F401

from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


def _cpu_copy(value):
    """A deep copy with tensors on the CPU (what is committed, and written to disk)."""
    if torch.is_tensor(value):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((k, _cpu_copy(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu_copy(v) for v in value)
    return copy.deepcopy(value)


def _map_tensors(value, function):
    """value with function applied to every tensor (or array) in its dicts, lists and tuples."""
    if isinstance(value, dict):
        return type(value)((k, _map_tensors(v, function)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, function) for v in value)
    return function(value)


def _as_array(x):
    """A tensor as a NumPy view of its CPU data (a copy only where it is on a GPU); bfloat16 stays a tensor."""
    if not torch.is_tensor(x):
        return x
    x = x.detach().cpu()
    return x if x.dtype == torch.bfloat16 else x.numpy()


def _as_arrays(value):
    """Tensors as NumPy views (pickled several times faster than tensors)."""
    return _map_tensors(value, _as_array)


def _as_tensors(value):
    return _map_tensors(value, lambda x: torch.from_numpy(x) if isinstance(x, np.ndarray) else x)


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
        self._saved_model = self._saved_optimizer = None
        self._saved_samplers = {}
        self._saved_sequence = None  # the commit in the host's memory that is the saved copy, if it is there
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **values)

    def save(self):
        self._saved_sequence = None
        if self.model is not None:
            self._saved_model = _cpu_copy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = _cpu_copy(self.optimizer.state_dict())
        self._saved_samplers = {name: s.state_dict() for name, s in self._samplers.items()}
        super().save()

    def restore(self):
        if self._saved_sequence is not None:
            self._take_saved(commits.read_memory(self._saved_sequence)["state"])
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
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

    def snapshot(self):
        return {"model": _as_arrays(self._saved_model), "optimizer": _as_arrays(self._saved_optimizer),
                "samplers": self._saved_samplers, "values": super().snapshot()}

    def live_snapshot(self):
        return {"model": _as_arrays(self.model.state_dict()) if self.model is not None else None,
                "optimizer": _as_arrays(self.optimizer.state_dict()) if self.optimizer is not None else None,
                "samplers": {name: s.state_dict() for name, s in self._samplers.items()},
                "values": {name: getattr(self, name) for name in self._saved_state}}

    def saved_in_memory(self, sequence):
        self._saved_sequence = sequence

    def load_snapshot(self, snapshot):
        self._take_saved(snapshot)
        self.restore()

    def _take_saved(self, snapshot):
        """Makes snapshot (as snapshot() returns it) the saved copy, without applying it."""
        self._saved_sequence = None
        self._saved_model = _as_tensors(snapshot["model"])
        self._saved_optimizer = _as_tensors(snapshot["optimizer"])
        self._saved_samplers = snapshot["samplers"]
        self._saved_state = dict(snapshot["values"])
