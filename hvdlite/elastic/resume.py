"""``@hvd.elastic.run``: resume from the newest commit, train, and leave the way the launcher expects.

A failure (HorovodInternalError, or a peer's death, which ends the processes) cannot be survived inside an MPI
job: the process exits non-zero and the launcher starts the job again, which resumes here from the newest
commit. New hosts (HostsUpdatedInterrupt, raised at a commit) end the processes with EXIT_HOSTS_UPDATED, which
the launcher answers by starting again on the larger set of hosts, without counting a failure.
"""
import functools
import os
import sys

from hvdlite import basics
from hvdlite.errors import HorovodInternalError, HostsUpdatedInterrupt
from hvdlite.runner.protocol import EXIT_HOSTS_UPDATED, RESTART_VARIABLE

from . import commits


def restarts(environ=os.environ):
    """How many times the launcher has restarted this job (0 on its first start)."""
    return int(environ.get(RESTART_VARIABLE, "0") or 0)


def run(func):
    """Decorates ``func(state, *args, **kwargs)``: on every start of the job, restores the newest commit of any
    host (or keeps the state as given on a first start), synchronises it from rank 0, calls ``func``, and once it
    returns, removes this job's commits. Returns what ``func`` returns."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not basics.is_initialized():
            basics.init()
        sequence, payload = commits.agree_and_load()
        if payload is not None:
            state.resume(sequence, payload)
        else:
            state.sync()
            state.save()
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            _leave(EXIT_HOSTS_UPDATED, "the hosts changed: stopping at this commit to restart on them")
        except HorovodInternalError as error:
            _leave(1, f"{error}; the launcher may restart the job from the last commit")
        if commits.writes_here():
            commits.remove()
        return result
    return wrapper


def _leave(code, why):
    print(f"[hvdlite rank {basics.rank()}] elastic: {why}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    commits.finish_in_memory()  # a commit still coming from this rank's GPU: local work, bounded
    os._exit(code)  # MPI cannot go on after this; no atexit handler may wait on peers that are gone
