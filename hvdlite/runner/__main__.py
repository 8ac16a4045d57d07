"""hvdliterun / python -m hvdlite.runner: parse, build the mpiexec command, run it, exit with its code."""
import os
import re
import shlex
import sys

from . import binding, rank_output, torch_variables
from .arguments import job_hosts, parse_args
from .command import abort_on_exception, build_command, mpiexec_variables
from .commit_removal import remove_commits
from .elastic import Supervisor
from .horovodrun_flags import tcp_variables
from .hosts import rank_placement
from .job import new_job_id, run_job
from .protocol import (COMMITTED, JOB_MARKER, JOB_VARIABLE, LAUNCHER_VARIABLE, NOTIFY_VARIABLE, OUTER_JOB_VARIABLE,
                       RESTART_VARIABLE, SECRET_VARIABLE)
from .mpiexec import OPENMPI, SLURM, detect_flavour, find_mpiexec
from .reachability import is_this_host, this_host_names, unreachable_hosts
from .report_port import report_addresses

# Not passed to Open MPI ranks on other hosts: shell functions and the previous directory (as horovodrun leaves
# them), and Open MPI's own variables, which it passes along itself.
_NOT_FORWARDED = re.compile(r"BASH_FUNC_.*|OLDPWD|(OMPI|PRTE|PMIX)_.*")


def _log(message):
    print(f"hvdliterun: {message}", file=sys.stderr, flush=True)


def launcher_variables(args):
    """The variables the launcher itself sets on mpiexec for the ranks (run_job, and Supervisor for restarts)."""
    names = [JOB_MARKER, LAUNCHER_VARIABLE, SECRET_VARIABLE, JOB_VARIABLE]
    if args.max_restarts or args.host_discovery_script:
        names.append(RESTART_VARIABLE)
    if args.host_discovery_script:
        names.append(NOTIFY_VARIABLE)
    return names


def job_environment(args, environ):
    """Variables set on every rank: the tuning flags, one OpenMP thread per rank unless asked otherwise, TCP's
    transports under --tcp, and torchrun's MASTER_ADDR and MASTER_PORT unless they are set."""
    env = {}
    if "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = "1"  # N ranks x all cores of threads each would oversubscribe the host
    if args.tcp:
        env.update(tcp_variables(environ))
    env.update(args.tuning_env)
    if not any(name in environ for name in torch_variables.MASTER_VARIABLES):
        hosts = job_hosts(args)
        first = hosts[0].name if hosts else None  # where rank 0 runs
        env.update(torch_variables.master(first, first is None or is_this_host(first, this_host_names())))
    return env


def describe_hosts(hosts, args, out, flavour):
    """One line per host: its ranks, and how its processes are started."""
    local = this_host_names()  # once: getfqdn may ask a name server
    for name, ranks in rank_placement(hosts, args.num_proc, spread_extra=flavour == OPENMPI).items():
        if args.launcher == SLURM:
            how = "started through srun"
        else:
            launcher = shlex.join([args.launcher_exec or "ssh", *args.ssh_args])
            how = "this host" if is_this_host(name, local) else f"started through `{launcher} {name} ...`"
        print(f"hvdliterun: {name}: ranks {', '.join(map(str, ranks)) or 'none'} ({how})", file=out, flush=True)


def main(argv=None):
    args = parse_args(argv)
    code = launch(args)
    if args.output_filename and not args.dry_run:
        rank_output.wait_for_copiers(args.output_filename)  # the files complete once hvdliterun returns
    return code


def launch(args):
    if args.check_build:
        from .check_build import report
        print(report(), flush=True)
        return 0
    try:
        mpiexec = find_mpiexec(args.mpiexec)
        flavour = detect_flavour(mpiexec)
    except (OSError, RuntimeError) as error:
        _log(str(error))
        return 2
    for warning in args.warnings:
        _log(warning)
    program = torch_variables.wrap(abort_on_exception(args.command) if args.abort_on_exception else list(args.command))
    if args.output_filename:
        program = rank_output.wrap(args.output_filename, program)
    env = job_environment(args, os.environ)
    # Open MPI passes ranks on other hosts only the variables named (-x): the whole environment is, as hydra passes
    # it, and those the launcher itself sets on mpiexec (where commits are, which start this is, where it listens).
    forward = sorted({n for n in os.environ if not _NOT_FORWARDED.fullmatch(n)} | set(launcher_variables(args))) \
        if flavour == OPENMPI else ()
    hosts = job_hosts(args)
    own_variables = mpiexec_variables(flavour, args.ssh_args, args.launcher)  # mpiexec's, not the ranks'
    launch_env = dict(os.environ, **env, **own_variables)

    def command_for(chosen_hosts, num_proc, hostfile=None, what=program):
        placement = binding.plan(args.bind_to, num_proc, chosen_hosts, binding.allowed_cpus())
        return build_command(flavour, mpiexec, num_proc, what, env=env, hosts=None if hostfile else chosen_hosts,
                             hostfile=hostfile, forward_env=forward, run_as_root=os.geteuid() == 0,
                             binding=binding.binding_arguments(flavour, placement), launcher_exec=args.launcher_exec,
                             interfaces=args.interfaces, mpi_args=args.mpi_args, ssh_args=args.ssh_args,
                             tcp_only=args.tcp, launcher=args.launcher)
    if args.host_discovery_script:
        return Supervisor(args, command_for, launch_env, _log).run()
    argv = command_for(args.hosts, args.num_proc, args.hostfile)
    if args.verbose or args.dry_run:
        out = sys.stderr if args.verbose and not args.dry_run else sys.stdout
        print(" ".join([f"{name}={shlex.quote(value)}" for name, value in own_variables.items()] +
                       [shlex.join(argv)]), file=out, flush=True)
        if hosts:
            describe_hosts(hosts, args, out, flavour)
    if args.dry_run:
        return 0
    if hosts and args.host_check and args.launcher != SLURM:  # Slurm's hosts are reached through srun
        problems = unreachable_hosts([host.name for host in hosts], args.launcher_exec, ssh_args=args.ssh_args)
        for problem in problems:
            _log(problem)
        if problems:
            _log("not starting the job (--no-host-check skips this check)")
            return 2
    if args.max_restarts:
        # The job on its hosts each time; another program (the removal of its commits) on the hosts given.
        return Supervisor(args, lambda placed_hosts, num_proc, what=program: argv if what is program else
                          command_for(placed_hosts, num_proc, what=what), launch_env, _log).run()
    return run_once(args, argv, launch_env, command_for)


def run_once(args, argv, env, command_for):
    """Runs a job that is not to restart; when it fails after a rank committed (hvd.elastic in a job without
    --max-restarts), removes its commits, which no later start could find, unless the program that started this
    launcher starts the job again itself (OUTER_JOB_VARIABLE: the commits are that program's)."""
    outer_job = env.get(OUTER_JOB_VARIABLE)
    job = outer_job or new_job_id()
    env = dict(env, **{JOB_VARIABLE: job})  # where its commits go, if it makes any
    hosts = [host.name for host in job_hosts(args) or []]
    outcome = run_job(argv, env, new_job_id(), log=_log if args.verbose else None, ranks=args.num_proc,
                      start_timeout=args.start_timeout, listen_on=report_addresses(hosts, args.interfaces))
    if outcome.code != 0 and COMMITTED in outcome.reports and not outer_job:
        remove_commits(job, hosts, env, command_for, args.launcher_exec, _log, args.ssh_args, args.launcher)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
