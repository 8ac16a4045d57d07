"""State objects: what a job commits, restores after a failure, and synchronises when ranks change.

As in Horovod, ``commit()`` saves a copy in memory and then checks for host changes; here it also keeps the copy
in every host's memory outside the processes and on its disk (commits.py), since a failure ends the processes.
``restore()`` goes back to the last commit, ``sync()`` makes every rank hold rank 0's state, and the reset
callbacks run when a job resumes on a different number of ranks. Subclasses provide ``save``/``restore``/``sync``
for their objects and ``snapshot``/``load_snapshot`` for the copy that goes to disk.
"""
import copy

from hvdlite import basics, ops
from hvdlite.errors import HostsUpdatedInterrupt

from . import commits, host_updates


class State:
    """The base of every state: commit bookkeeping, host updates and reset callbacks."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or ops.broadcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []
        self._sequence = 0        # commits so far in this job, the same on every rank
        self._committed_size = None  # ranks of the job that made the last commit

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order) when the job resumes on a different number of ranks."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, current_hosts, update_res):
        """Horovod's hook for host changes; nothing to do here: the job restarts on the new hosts."""

    def commit(self):
        """Saves the state in memory and on every host (commits.py), then checks for host changes (HostsUpdatedInterrupt
        on every rank if they did: the job restarts on the new hosts from this commit)."""
        self._sequence += 1
        self._committed_size = basics.size()
        writer = commits.writes_here()
        live = self.live_snapshot() if writer else None
        if live is not None and commits.write(self._sequence, self._payload(live)):
            # The host's memory copy is this rank's saved copy too (restore() reads it back): one copy of the
            # state per commit instead of two.
            self.saved_in_memory(self._sequence)
        else:
            self.save()
            if writer and live is None:
                self.write_saved()
        self.check_host_updates()

    def write_saved(self):
        """Writes the saved copy (just made by ``save``) as this commit into the host's memory; subclasses whose
        copy is on a GPU finish it in the background (commits.write_filled_later)."""
        commits.write(self._sequence, self._payload(self.snapshot()))

    def _payload(self, snapshot):
        return {"sequence": self._sequence, "size": self._committed_size, "state": snapshot}

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher's hosts changed."""
        if host_updates.agreed():
            raise HostsUpdatedInterrupt(skip_sync=True)

    def resume(self, sequence, payload):
        """Loads a commit read back from disk (commits.agree_and_load) and runs the reset callbacks when it was
        made by a job of another size."""
        self._sequence = sequence
        self.load_snapshot(payload["state"])
        self.save()
        if payload["size"] != basics.size():
            self.on_reset()

    # For subclasses.
    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def snapshot(self):
        """A picklable copy of the committed state (what ``save`` kept)."""
        raise NotImplementedError

    def load_snapshot(self, snapshot):
        raise NotImplementedError

    def live_snapshot(self):
        """What ``snapshot`` would return after ``save``, but read from the live objects without copying them
        (commits.write copies it into the host's memory); None where a state has no such view."""
        return None

    def saved_in_memory(self, sequence):
        """Called when commit ``sequence``, written from ``live_snapshot``, is the saved copy: ``restore`` must
        read it back from the host's memory (commits.read_memory)."""
        raise NotImplementedError


class ObjectState(State):
    """Picklable Python values as attributes (``ObjectState(epoch=0, batch=0)``; ``state.epoch += 1``)."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def snapshot(self):
        return self._saved_state

    def load_snapshot(self, snapshot):
        self._saved_state = dict(snapshot)
        self._set_attrs()
