"""The elastic commit folders on this machine (hvdlite.runner.commit_folders names them): on disk under the temporary
directory and in memory under /dev/shm, for tests that check a job leaves none of its own behind."""
import os
import tempfile

from hvdlite.runner import commit_folders


def commit_folders_here():
    return {os.path.join(root, name) for root in (tempfile.gettempdir(), commit_folders.MEMORY_ROOT)
            if os.path.isdir(root) for name in os.listdir(root) if name.startswith("hvdlite-elastic-")}
