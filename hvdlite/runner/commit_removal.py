"""The launcher's last step for an elastic job that will not start again (it failed and may not restart, or the
launcher was told to stop) after its ranks reported a commit: removing its commits on every host it ran on that
still answers, so that no host keeps the state's memory slots for a job id no later start uses. Commits in a
folder the user chose (HVDLITE_ELASTIC_COMMIT_DIR) are theirs: they stay, and the launcher says where, since a new
start of the job with the same folder resumes from them.
"""
import sys

from . import commit_folders
from .protocol import JOB_VARIABLE, NOTIFY_VARIABLE, RESTART_VARIABLE
from .hosts import Host
from .job import new_job_id, run_job
from .mpiexec import SLURM
from .reachability import host_problems

REMOVAL_SECONDS = 60.0  # the most the removal may take, on all the job's hosts at once


def kept_by_user(env, log):
    """True, having said where, when the ranks' environment ``env`` puts the commits in a folder the user chose."""
    kept = commit_folders.configured(env)
    if kept:
        log(f"the job's commits stay in {kept} on each host: start the job again with the same "
            f"{commit_folders.COMMIT_DIR.env} to resume from the last one")
    return bool(kept)


def remove_commits(job, host_names, env, build_argv, launcher_exec, log, ssh_args=(), launcher=None):
    """Removes job ``job``'s commits on the hosts named (none: this host), through mpiexec as the job was started
    (``build_argv(hosts or None, num_proc, what=program)``), with the ranks' environment ``env``."""
    if kept_by_user(env, log):
        return
    # Only hosts that answer: mpiexec would wait for the others (a Slurm allocation's hosts answer through srun).
    lost = {} if launcher == SLURM else host_problems(host_names, launcher_exec, ssh_args=ssh_args)
    hosts = [Host(name, 1) for name in host_names if name not in lost]
    if host_names and not hosts:
        return
    argv = build_argv(hosts or None, len(hosts) or 1, what=[sys.executable, "-m", commit_folders.__name__])
    # The removal reads the job's id only; the others are set as on a start of the job (Open MPI is told to pass
    # them along, and warns about any it does not find).
    env = dict(env, **{JOB_VARIABLE: job, RESTART_VARIABLE: "", NOTIFY_VARIABLE: ""})
    code = run_job(argv, env, new_job_id(), log=log, timeout=REMOVAL_SECONDS).code
    where = f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}" if hosts else "this host"
    log(f"removed the job's commits on {where}" if code == 0 else
        f"could not remove the job's commits on {where} (exit code {code}, output above)")
