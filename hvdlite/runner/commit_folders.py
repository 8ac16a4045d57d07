"""Where an elastic job's commits are on a host: the folder on its disk and the one in its memory (/dev/shm), as
the ranks (hvdlite.elastic.commits) and the launcher both need them.

Free of the native core, so that the launcher can use it: when it gives a job up, it runs
``python -m hvdlite.runner.commit_folders`` on every host the job ran on, through mpiexec (with the environment the
ranks had), which removes that job's commits there. A job whose commit directory the user set keeps them: a new
start of the job with the same directory resumes from the last commit.
"""
import functools
import hashlib
import os
import shutil
import socket
import tempfile

from hvdlite import config

from .protocol import JOB_VARIABLE

MEMORY_ROOT = "/dev/shm"

COMMIT_DIR = config.SETTINGS_BY_NAME["elastic_commit_dir"]
_DIRECTORY_VARIABLES = tuple(v for v in (COMMIT_DIR.env, COMMIT_DIR.alias, JOB_VARIABLE) if v)


def configured(environ=os.environ):
    """The commit directory the user set (HVDLITE_ELASTIC_COMMIT_DIR), or None for the default, one per job."""
    return COMMIT_DIR.read(environ) or None


def directory(environ=os.environ):
    """This job's commit directory on this host. In HVDLITE_ELASTIC_COMMIT_DIR, ``{host}`` stands for this host's
    name (hosts that share a file system then keep separate copies)."""
    # Every commit asks (a few times): the answer is cached for the variables it depends on.
    return _directory(tuple((v, environ[v]) for v in _DIRECTORY_VARIABLES if v in environ), os.getppid())


@functools.lru_cache(maxsize=8)
def _directory(variables, parent):
    environ = dict(variables)
    chosen = configured(environ)
    if chosen:
        return chosen.replace("{host}", socket.gethostname())
    job = environ.get(JOB_VARIABLE) or f"pid{parent}"
    return os.path.join(tempfile.gettempdir(), f"hvdlite-elastic-{job}")


def memory_directory(environ=os.environ):
    """This job's folder in this host's memory (None where there is no /dev/shm): one per commit directory."""
    return _memory_folder(MEMORY_ROOT, directory(environ))


@functools.lru_cache(maxsize=8)
def _memory_folder(root, disk_directory):
    # Cached: every commit asks, and the answer does not change while a job runs.
    if not os.path.isdir(root) or not os.access(root, os.W_OK):
        return None
    disk_directory = os.path.abspath(disk_directory)
    return os.path.join(root, f"hvdlite-elastic-{hashlib.sha1(disk_directory.encode()).hexdigest()[:16]}")


def remove_here(environ=os.environ):
    """Deletes the job's commits on this host, in memory and on disk."""
    for folder in (memory_directory(environ), directory(environ)):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    remove_here()
