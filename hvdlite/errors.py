"""Error types of hvdlite (Horovod's names kept as aliases)."""


class HvdliteError(RuntimeError):
    """A collective failed: ranks disagreed, a peer stalled or shut down, or the core is not running."""


# Horovod scripts catch this name.
HorovodInternalError = HvdliteError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised at ``state.commit()`` or ``state.check_host_updates()`` on every rank when the launcher found new
    hosts: the job stops at that commit and starts again larger, without rolling back. ``skip_sync`` is
    Horovod's flag (True when only hosts were added, so no state needs to be re-synchronised)."""

    def __init__(self, skip_sync=True):
        super().__init__("the launcher found new hosts; the job restarts on them from this commit")
        self.skip_sync = skip_sync
