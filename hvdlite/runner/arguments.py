"""hvdliterun's command line. Tuning flags come from the configuration table (hvdlite.config.SETTINGS)."""
import argparse
import os
import shlex

from .. import __version__, config
from . import binding, config_file, horovodrun_flags, slurm, start_watch
from .hosts import parse_host_list, read_hostfile
from .mpiexec import FORK, SLURM

USAGE = ("hvdliterun -np N [-H host:slots,...|--hostfile FILE] [-p PORT] [-i KEY] [--launcher-exec PROGRAM] "
         "[--no-host-check] [--network-interface NAMES] [--bind-to auto|cpus|none] "
         "[--max-restarts N | --host-discovery-script SCRIPT [elastic flags]] [tuning flags] [--config-file FILE] "
         "[--output-filename DIR] [--mpi-args ARGS] [--verbose] [--dry-run] COMMAND ...  |  "
         "hvdliterun --check-build  |  hvdliterun --version")


def _add_tuning_flags(parser):
    group = parser.add_argument_group("tuning (each sets its HVDLITE_* variable on every rank)")
    for setting in config.SETTINGS:
        if not setting.flag:
            continue
        dest = "setting_" + setting.name
        help_text = f"{setting.meaning} (sets {setting.env})"
        names = (setting.flag, *horovodrun_flags.TUNING_ALIASES.get(setting.name, ()))
        if setting.type_name == "bool":
            group.add_argument(*names, dest=dest, action="store_true", default=None, help=help_text)
        elif setting.choices:
            group.add_argument(*names, dest=dest, choices=setting.choices, type=str.lower, help=help_text)
        else:
            unit = "MiB" if setting.flag_scale == config.MiB else setting.type_name.upper()
            group.add_argument(*names, dest=dest, metavar=unit, help=help_text)
        if setting.name in horovodrun_flags.NEGATIONS:
            flag, value = horovodrun_flags.NEGATIONS[setting.name]
            group.add_argument(flag, dest=dest, action="store_const", const=value, help=f"horovodrun's: {setting.env}="
                               f"{setting.flag_to_env(value)}")
    group.add_argument("--hierarchical-allreduce", dest="setting_allreduce_algorithm", action="store_const",
                       const="hierarchical", help="horovodrun's name for --allreduce-algorithm hierarchical")
    group.add_argument("--config-file", dest="config_file", metavar="FILE",
                       help="horovodrun's YAML file of these settings (sections params, autotune, timeline, "
                            "stall_check, library_options, logging); a flag given here wins over the file")


def _add_restart_flags(parser):
    group = parser.add_argument_group("restarts and elastic training (the ranks resume from their last commit: "
                                      "hvdlite.elastic)")
    group.add_argument("--max-restarts", type=int, default=0, metavar="N",
                       help="start the job again, on the same hosts and as many ranks, up to N times after it fails")
    group.add_argument("--host-discovery-script", metavar="SCRIPT",
                       help="elastic: a program printing the available hosts, one 'host:slots' (or 'host') per "
                            "line; the job runs on what it lists and restarts when hosts fail or are added")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                       help="elastic: fewest ranks to run with (default: -np)")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                       help="elastic: most ranks to run with (default: all slots)")
    group.add_argument("--slots-per-host", "--slots", dest="slots_per_host", type=int, default=1, metavar="N",
                       help="elastic: slots of a host the discovery script lists without a count (default 1)")
    group.add_argument("--elastic-timeout", type=float, default=600.0, metavar="SECONDS",
                       help="elastic: how long to wait for --min-np slots before giving up (default 600)")
    group.add_argument("--reset-limit", type=int, metavar="N",
                       help="elastic: most restarts of the job, whatever their cause (default: no limit)")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("LOW", "HIGH"),
                       help="elastic: a failed host is left out for a random time between LOW and HIGH seconds "
                            "(default: for the rest of the job)")


def make_parser():
    parser = argparse.ArgumentParser(prog="hvdliterun", usage=USAGE,
                                     description="Run a data-parallel job through the MPI library's mpiexec.")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int,
                        help="number of processes (elastic: the least to start with, unless --min-np says)")
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", dest="hosts", help="hosts and slots, e.g. a:2,b:2 (default: this host)")
    hosts.add_argument("-hostfile", "--hostfile", dest="hostfile", help="file of 'host slots=N' or 'host:N' lines")
    parser.add_argument("--bind-to", dest="bind_to", choices=binding.CHOICES, default=binding.AUTO,
                        help="CPUs of each rank: 'cpus' binds each to an equal share of the host's CPUs, 'none' "
                             "leaves placement to the scheduler, 'auto' (default) binds when the job runs on this "
                             "host alone with a CPU for every rank (Open MPI: its own default binding)")
    parser.add_argument("--launcher-exec", dest="launcher_exec", metavar="PROGRAM",
                        help="program that starts processes on the other hosts, called as ssh would be "
                             "(PROGRAM HOST COMMAND...); default: ssh")
    parser.add_argument("-p", "--ssh-port", dest="ssh_port", type=int, metavar="PORT",
                        help="the port of the other hosts' ssh servers (ssh's -p; also given to --launcher-exec)")
    parser.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file", metavar="FILE",
                        help="the private key ssh logs in to the other hosts with (ssh's -i)")
    parser.add_argument("--no-host-check", dest="host_check", action="store_false",
                        help="do not check that every other host resolves and answers through the launcher "
                             "before starting (each within 10 s, all at once)")
    parser.add_argument("--mpiexec", help="mpiexec to use (default: the one of the MPI hvdlite was built with)")
    parser.add_argument("--no-abort-on-exception", dest="abort_on_exception", action="store_false",
                        help="do not run Python programs through `python -m hvdlite.runner.python_rank` (which, as "
                             "`python -m mpi4py`, aborts the whole job when one rank raises)")
    _add_restart_flags(parser)
    parser.add_argument("--start-timeout", type=float, default=start_watch.DEFAULT_SECONDS, metavar="SECONDS",
                        help="once every rank has begun MPI's start-up, how long they may take to get through it "
                             "before the job is ended with a message (ranks that cannot reach each other would wait "
                             f"forever); 0: no limit (default {start_watch.DEFAULT_SECONDS:g})")
    parser.add_argument("--network-interface", "--network-interfaces", dest="interfaces", metavar="NAMES",
                        action="append", default=[],
                        help="network interfaces the job may use, separated by commas (e.g. eth0), where a host "
                             "has some that do not reach the others (docker0, a management network); default: "
                             "MPI's choice")
    parser.add_argument("--mpi-args", dest="mpi_args", default="", metavar="ARGS",
                        help="further options for mpiexec, as one string (e.g. \"-genv FI_PROVIDER tcp\" for hydra, "
                             "\"--mca btl self,tcp\" for Open MPI), placed before the command")
    parser.add_argument("--output-filename", dest="output_filename", metavar="DIR",
                        help="also write each rank's stdout and stderr to DIR/rank.N/stdout and DIR/rank.N/stderr, "
                             "on the host the rank runs on (a restarted job adds to them)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the mpiexec command before running it")
    parser.add_argument("--version", action="version", version=f"hvdliterun {__version__}",
                        help="print hvdlite's version and exit")
    parser.add_argument("-cb", "--check-build", dest="check_build", action="store_true",
                        help="print the frameworks, controllers and tensor operations available, and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the mpiexec command and exit")
    _add_tuning_flags(parser)
    horovodrun_flags.add_to(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


def parse_args(argv=None):
    """Parsed arguments with .hosts (list of Host), .hostfile (Hostfile), .tuning_env (HVDLITE_* -> value, from the
    tuning flags and --config-file) and .warnings (horovodrun's flags and the file's keys that were ignored, and
    why)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.check_build:
        return args
    refusal = horovodrun_flags.refusal(args)
    if refusal:
        parser.error(refusal)
    # Given once as a list (eth0,eth1) or once for each (horovodrun takes both).
    args.interfaces = list(dict.fromkeys(name.strip() for given in args.interfaces for name in given.split(",")
                                         if name.strip()))
    try:
        args.mpi_args = shlex.split(args.mpi_args)
        if args.binding_args:
            if args.bind_to != binding.AUTO:
                parser.error("give either --bind-to or --binding-args")
            args.bind_to = binding.NONE  # the binding is mpiexec's, as asked
            args.mpi_args += shlex.split(args.binding_args)
    except ValueError as error:
        parser.error(f"--mpi-args/--binding-args: {error}")
    if args.host_discovery_script:
        if args.hosts or args.hostfile:
            parser.error("--host-discovery-script chooses the hosts: drop -H/--hostfile")
        args.min_np = args.min_np or args.num_proc or 1
        args.num_proc = args.num_proc or args.min_np
        if args.max_np is not None and args.max_np < args.min_np:
            parser.error("--max-np must be at least --min-np")
    elif args.num_proc is None:
        parser.error("-np is required (or --host-discovery-script for an elastic job)")
    if args.num_proc < 1:
        parser.error("-np must be at least 1")
    if args.start_timeout < 0:
        parser.error("--start-timeout must be at least 0")
    if args.max_restarts < 0:
        parser.error("--max-restarts must be at least 0")
    args.ssh_args = _ssh_args(parser, args)
    if not args.command:
        parser.error("no command given, e.g. hvdliterun -np 2 python train.py")
    try:
        args.hosts = parse_host_list(args.hosts) if args.hosts else None
        args.hostfile = read_hostfile(args.hostfile) if args.hostfile else None
        args.launcher, allocation = launcher_for(args, os.environ)
        args.hosts = args.hosts or allocation
        args.tuning_env = tuning_env(args)
        args.warnings = horovodrun_flags.ignored_warnings(args)
        if args.config_file:
            file_env, file_warnings = config_file.read(args.config_file)
            args.tuning_env = {**file_env, **args.tuning_env}
            args.warnings += file_warnings
    except (OSError, ValueError) as error:
        parser.error(str(error))
    return args


def launcher_for(args, environ):
    """(how mpiexec starts the ranks, the hosts that gives them or None): SLURM and the allocation's hosts inside a
    Slurm allocation (a batch script, salloc's shell) when no hosts and no launcher program are given; FORK inside a
    job step without hosts (another srun would wait for the CPUs the step holds, which mpiexec itself would ask for
    when it sees Slurm's variables); else None (ssh or --launcher-exec to the hosts given, this host when none)."""
    if args.hosts or args.hostfile or args.host_discovery_script or args.launcher_exec or \
            not environ.get("SLURM_JOB_ID"):
        return None, None
    if slurm.in_job_step(environ):
        return FORK, None
    allocation = slurm.allocation_hosts(environ)
    return (SLURM if allocation else None), allocation


def _ssh_args(parser, args):
    """ssh's options for -p/-i, as hydra (which splits them at spaces) and Open MPI pass them on."""
    ssh_args = []
    if args.ssh_port is not None:
        if not 0 < args.ssh_port < 65536:
            parser.error(f"--ssh-port {args.ssh_port}: not a port number (1-65535)")
        ssh_args += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        path = os.path.abspath(os.path.expanduser(args.ssh_identity_file))
        if not os.path.isfile(path):
            parser.error(f"--ssh-identity-file {args.ssh_identity_file}: no such file")
        if any(character.isspace() for character in path):
            parser.error(f"--ssh-identity-file {path}: MPI passes ssh's options split at spaces, so the key's "
                         "path may hold none")
        ssh_args += ["-i", path]
    return ssh_args


def tuning_env(args):
    """{HVDLITE_* name: value} for every tuning flag given on the command line."""
    env = {}
    for setting in config.SETTINGS:
        value = getattr(args, "setting_" + setting.name, None)
        if setting.flag and value is not None:
            env[setting.env] = setting.flag_to_env(value)
    return env


def job_hosts(args):
    """The hosts given with -H or --hostfile (or the Slurm allocation's), or None (this host)."""
    return args.hosts or (args.hostfile.hosts if args.hostfile else None)
