"""Error types of hvdlite (Horovod's names kept as aliases)."""


class HvdliteError(RuntimeError):
    """A collective failed: ranks disagreed, a peer stalled or shut down, or the core is not running."""


# Horovod scripts catch this name.
HorovodInternalError = HvdliteError
