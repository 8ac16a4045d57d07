"""Error types of hvdlite (Horovod's names kept as aliases)."""


class HvdliteError(RuntimeError):
    """A collective failed: ranks disagreed, a peer stalled or shut down, or the core is not running."""


# Horovod scripts catch this name.
HorovodInternalError = HvdliteError


class InvalidRequestError(ValueError, RuntimeError):
    """This rank's request was refused before anything was sent (a bad argument: an op the collective does not
    take, a name already in flight, a process set this rank is not in, ...); the message names the tensor. A
    ValueError, and a RuntimeError as Horovod's ops raise for the same mistakes."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised at ``state.commit()`` or ``state.check_host_updates()`` on every rank when the launcher's host
    discovery changed (room for more ranks, or a host the job runs on no longer listed): the job stops at that
    commit and starts again on the hosts listed, without rolling back. ``skip_sync`` is Horovod's flag."""

    def __init__(self, skip_sync=True):
        super().__init__("the launcher's hosts changed; the job restarts on them from this commit")
        self.skip_sync = skip_sync
