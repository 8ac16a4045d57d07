"""hvdliterun / python -m hvdlite.run: parse, build the mpiexec command, run it, exit with its code."""
import os
import shlex
import sys

from . import binding
from .arguments import parse_args
from .command import abort_on_exception, build_command
from .job import new_job_id, run_job
from .mpiexec import OPENMPI, detect_flavour, find_mpiexec

# Forwarded by name to Open MPI ranks on other hosts (hydra forwards the whole environment already).
_FORWARDED_PREFIXES = ("HVDLITE_", "HOROVOD_", "PYTHONPATH", "LD_LIBRARY_PATH", "PATH")


def _log(message):
    print(f"hvdliterun: {message}", file=sys.stderr, flush=True)


def job_environment(args, environ):
    """Variables set on every rank: the tuning flags, and one OpenMP thread per rank unless asked otherwise."""
    env = {}
    if "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = "1"  # N ranks x all cores of threads each would oversubscribe the host
    env.update(args.tuning_env)
    return env


def main(argv=None):
    args = parse_args(argv)
    try:
        mpiexec = find_mpiexec(args.mpiexec)
        flavour = detect_flavour(mpiexec)
    except (OSError, RuntimeError) as error:
        _log(str(error))
        return 2
    program = abort_on_exception(args.command) if args.abort_on_exception else list(args.command)
    env = job_environment(args, os.environ)
    forward = sorted(n for n in os.environ if n.startswith(_FORWARDED_PREFIXES)) if flavour == OPENMPI else ()
    hosts = args.hosts or (args.hostfile.hosts if args.hostfile else None)
    placement = binding.plan(args.bind_to, args.num_proc, hosts, binding.allowed_cpus())
    argv = build_command(flavour, mpiexec, args.num_proc, program, env=env, hosts=args.hosts,
                         hostfile=args.hostfile, forward_env=forward, run_as_root=os.geteuid() == 0,
                         binding=binding.binding_arguments(flavour, placement))
    if args.verbose or args.dry_run:
        print(shlex.join(argv), file=sys.stderr if args.verbose and not args.dry_run else sys.stdout, flush=True)
    if args.dry_run:
        return 0
    return run_job(argv, dict(os.environ, **env), new_job_id(), log=_log if args.verbose else None)


if __name__ == "__main__":
    sys.exit(main())
