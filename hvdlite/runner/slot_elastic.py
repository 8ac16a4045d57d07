"""Elastic runs on an engine's slots (hvdlite.spark.run_elastic, an elastic hvdlite.ray.RayExecutor), by restart as
hvdliterun's elastic mode is. Each start is one job on slots (slot_job.run_on_slots) with as many ranks as the
engine has slots for now, within min..max. When a start fails because a slot was lost (a task or actor died), a
rank's process died or the slots did not all start, the slots are given back and the job starts again on new ones,
its ranks resuming from the newest commit (hvd.elastic.run). Every start carries the same job id
(protocol.OUTER_JOB_VARIABLE: hvdliterun then uses it, so each start finds the commits of the one before, and
leaves them to this loop) and its number (RESTART_VARIABLE: ``hvd.elastic`` restores on a restart).

A function that raises (RankFailed) is not started again: it would raise again; a peer's failure reaches a rank
inside ``hvd.elastic.run`` as HorovodInternalError, which ends its process instead. A run that succeeds has its
ranks remove the job's commits. One that gives up has the engine remove them on its machines (Spark: through every
slot it has free once more, since the failed start's own may be gone or being cancelled; Ray: a task on each node);
where the user chose the commit folder (HVDLITE_ELASTIC_COMMIT_DIR) they stay, as hvdliterun leaves them.
"""
import os
import shlex
import sys
import time

from . import commit_folders
from .commit_removal import kept_by_user
from .function_runner import RankFailed
from .job import new_job_id
from .protocol import JOB_VARIABLE, OUTER_JOB_VARIABLE, RESTART_VARIABLE
from .slot_client import run_in_slot
from .slot_job import SlotLost, run_on_slots

WAIT_INTERVAL_SECONDS = 1.0  # between looks at the engine's free slots while there are fewer than the minimum
REMOVAL_START_SECONDS = 60.0  # for the slots that remove a given-up job's commits to start


class SlotSource:
    """What an engine gives an elastic run: slots on demand. Subclasses: hvdlite.spark's, hvdlite.ray's."""

    caller_host = None  # the name or address by which the slots reach this process

    def available(self):
        """How many slots the engine could hand out now."""
        raise NotImplementedError

    def acquire(self, count, timeout):
        """A SlotRegistry of ``count`` slots, every one registered within ``timeout`` seconds; raises
        (TimeoutError, RuntimeError) when they do not all start, having given back what did."""
        raise NotImplementedError

    def release(self, registry, failed):
        """Gives the slots back (``failed``: the job on them failed; the engine may cancel what is left)."""
        raise NotImplementedError

    def registered(self, registry, timeout):
        """``registry`` (its slots asked for) once every slot has registered; gives them back and raises when they
        do not within ``timeout`` seconds."""
        try:
            registry.wait_for_all(timeout)
        except BaseException:
            self.release(registry, failed=True)
            raise
        return registry

    def remove_commits(self, job, log):
        """Removes job ``job``'s commits on the machines of every slot the engine has free (an engine that can
        reach each of its machines otherwise does better)."""
        count = self.available()
        try:
            if count < 1:
                raise RuntimeError("no slot is free")
            registry = self.acquire(count, REMOVAL_START_SECONDS)
        except (RuntimeError, TimeoutError) as error:
            log(f"could not remove the job's commits: {_first_line(error)}")
            return
        try:
            for alias, indices in registry.groups():
                slot = registry.slots[indices[0]]
                code = run_in_slot((slot["address"], slot["port"]), registry.secret, removal_command(job), alias)
                if code != 0:
                    log(f"could not remove the job's commits on {alias}'s machine (exit code {code})")
        finally:
            self.release(registry, failed=False)


def removal_command(job):
    """The shell line that removes job ``job``'s commits on the machine it runs on."""
    return shlex.join(["env", f"{JOB_VARIABLE}={job}", sys.executable, "-m", commit_folders.__name__])


def run_elastic_on_slots(func, args, kwargs, source, num_proc, min_num_proc, max_num_proc, elastic_timeout,
                         reset_limit, log, start_timeout, env=None, **job_options):
    """``func(*args, **kwargs)`` on ``num_proc`` ranks first, restarted after failures (at most ``reset_limit``
    times; None: no limit) on as many as ``source`` has slots for, within ``min_num_proc``..``max_num_proc`` (None:
    no maximum), waiting up to ``elastic_timeout`` seconds for the minimum and ``start_timeout`` for each start's
    slots. Returns the last start's values in rank order. ``job_options``: run_on_slots's others (mpi_args,
    verbose, stdout, stderr, network_interfaces)."""
    if not 1 <= min_num_proc <= num_proc <= (max_num_proc or num_proc):
        raise ValueError(f"need 1 <= min_num_proc ({min_num_proc}) <= num_proc ({num_proc}) <= max_num_proc "
                         f"({max_num_proc})")
    job = new_job_id()
    restarts, count = 0, num_proc
    while True:
        registry = None
        try:
            registry = source.acquire(count, start_timeout)
            start_env = dict(env or {}, **{OUTER_JOB_VARIABLE: job, RESTART_VARIABLE: str(restarts)})
            result = run_on_slots(func, args, kwargs, registry, source.caller_host, start_timeout=start_timeout,
                                  env=start_env, **job_options)
        except (SlotLost, RankFailed, RuntimeError, TimeoutError) as failure:
            if registry is not None:
                source.release(registry, failed=True)
            if isinstance(failure, RankFailed):
                _give_up(source, job, env, log)
                raise
            if reset_limit is not None and restarts >= reset_limit:
                log(f"the job failed after {restarts} restarts, the reset limit: {_first_line(failure)}")
                _give_up(source, job, env, log)
                raise
            restarts += 1
            count = _wait_for_slots(source, min_num_proc, max_num_proc, elastic_timeout, job, env, log)
            log(f"restart {restarts} on {count} slots: {_first_line(failure)}; starting again from the last "
                "commit")
            continue
        source.release(registry, failed=False)
        return result


def _wait_for_slots(source, low, high, timeout, job, env, log):
    """How many ranks the next start gets: the engine's free slots, at most ``high`` (if not None), once there are
    ``low``."""
    deadline = time.monotonic() + timeout
    while True:
        free = source.available()
        if free >= low:
            return min(free, high or free)
        if time.monotonic() >= deadline:
            message = (f"only {free} slots free after waiting {timeout:g} s for at least {low} (elastic_timeout); "
                       "giving up")
            log(message)
            _give_up(source, job, env, log)
            raise TimeoutError(message)
        time.sleep(WAIT_INTERVAL_SECONDS)


def _give_up(source, job, env, log):
    """The run ends without success: removes the job's commits on the engine's machines (where they are the
    user's, says where they stay)."""
    if not kept_by_user(dict(os.environ, **(env or {})), log):  # the ranks' environment, as run_on_slots makes it
        source.remove_commits(job, log)


def _first_line(error):
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
