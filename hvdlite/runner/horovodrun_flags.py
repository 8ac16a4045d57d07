"""horovodrun's flags that hvdliterun has under another name, has no use for, or cannot honour: a horovodrun command
line runs with `hvdliterun` in its place. Each such flag is mapped to hvdlite's own, or accepted and reported as
ignored with the reason (it tunes something hvdlite does not have), or refused with what to do instead.
"""
import argparse

# hvdlite's tuning settings (hvdlite.config.SETTINGS) that horovodrun spells differently.
TUNING_ALIASES = {
    "stall_check_seconds": ("--stall-check-warning-time-seconds",),
    "stall_shutdown_seconds": ("--stall-check-shutdown-time-seconds",),
}
# horovodrun's "--no-" forms of boolean tuning flags: setting name -> (flag, value it sets).
NEGATIONS = {
    "autotune": ("--no-autotune", False),
    "timeline_mark_cycles": ("--no-timeline-mark-cycles", False),
    "stall_check_disable": ("--stall-check", False),
}

# Why hvdlite has no use for a horovodrun setting (its flags here, its config file's keys in config_file.py).
WHY_IGNORED = {
    "hierarchical_allgather": "hvdlite's allgather has one algorithm, on one host and across hosts",
    "bayesian_autotune": "hvdlite's autotune tries a fixed list of values one setting at a time instead of "
                         "Bayesian optimisation",
    "mpi_threads": "mpi4py starts MPI: mpi4py.rc.thread_level, set before hvdlite is imported, chooses its thread "
                   "level",
    "nccl_streams": "hvdlite all-reduces GPU tensors on one NCCL stream",
    "thread_affinity": "hvdliterun binds each rank, its background thread included, to CPUs of its own (--bind-to)",
    "gloo": "hvdlite runs on MPI, not Gloo",
    "ccl": "hvdlite has no oneCCL controller",
    "timestamps": "hvdlite's log lines carry no timestamp",
    "output_timestamps": "ranks' output passes through unchanged (--output-filename keeps it per rank)",
}
# flag -> (takes a value, why it is ignored)
IGNORED = {
    "--hierarchical-allgather": (False, WHY_IGNORED["hierarchical_allgather"]),
    "--no-hierarchical-allgather": (False, WHY_IGNORED["hierarchical_allgather"]),
    "--autotune-bayes-opt-max-samples": (True, WHY_IGNORED["bayesian_autotune"]),
    "--autotune-gaussian-process-noise": (True, WHY_IGNORED["bayesian_autotune"]),
    "--mpi-threads-disable": (False, WHY_IGNORED["mpi_threads"]),
    "--no-mpi-threads-disable": (False, WHY_IGNORED["mpi_threads"]),
    "--num-nccl-streams": (True, WHY_IGNORED["nccl_streams"]),
    "--thread-affinity": (True, WHY_IGNORED["thread_affinity"]),
    "--gloo-timeout-seconds": (True, WHY_IGNORED["gloo"]),
    "--log-with-timestamp": (False, WHY_IGNORED["timestamps"]),
    "--log-without-timestamp": (False, WHY_IGNORED["timestamps"]),
    "--log-hide-timestamp": (False, WHY_IGNORED["timestamps"]),
    "--no-log-hide-timestamp": (False, WHY_IGNORED["timestamps"]),
    "--prefix-output-with-timestamp": (False, WHY_IGNORED["output_timestamps"]),
}
IGNORED_SHORT = {"--prefix-output-with-timestamp": "-prefix-timestamp"}

# Asked of the ranks by --tcp where the user has not set them: MPICH over libfabric's TCP provider or UCX's TCP
# transport, and NCCL's sockets instead of InfiniBand.
TCP_VARIABLES = {"FI_PROVIDER": "tcp", "UCX_TLS": "self,sm,tcp", "NCCL_IB_DISABLE": "1"}
# Open MPI's: the TCP transport between hosts (shared memory within one), not UCX or InfiniBand.
OPENMPI_TCP_OPTIONS = ("--mca", "pml", "ob1", "--mca", "btl", "self,sm,tcp")


class _Ignore(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        namespace.ignored_flags = [*getattr(namespace, "ignored_flags", []), option_string]


def add_to(parser):
    """Adds horovodrun's flags that have no hvdlite flag of the same name (aliases are added where the flags are)."""
    group = parser.add_argument_group("horovodrun's flags (accepted so that its command lines run unchanged)")
    for flag, (takes_value, reason) in IGNORED.items():
        names = [IGNORED_SHORT[flag], flag] if flag in IGNORED_SHORT else [flag]
        group.add_argument(*names, action=_Ignore, nargs=1 if takes_value else 0, dest="ignored_flags",
                           default=[], metavar="VALUE", help=f"ignored: {reason}")
    group.add_argument("--mpi", action="store_true", help="horovodrun's controller choice: hvdlite always runs on MPI")
    group.add_argument("--gloo", action="store_true", help="refused: hvdlite runs on MPI only")
    group.add_argument("--jsrun", action="store_true", help="refused: start the job with jsrun itself")
    group.add_argument("--disable-cache", action="store_true",
                       help="horovodrun's: hvdliterun keeps no cache of its host checks, they run every time")
    group.add_argument("--binding-args", dest="binding_args", metavar="ARGS",
                       help="mpiexec's own binding options, as one string, in place of --bind-to")
    group.add_argument("--tcp", action="store_true",
                       help="TCP only between hosts (no InfiniBand): " +
                            ", ".join(f"{name}={value}" for name, value in TCP_VARIABLES.items()) +
                            " unless set; Open MPI: " + " ".join(OPENMPI_TCP_OPTIONS))


def ignored_warnings(args):
    """A line for each horovodrun flag given that hvdlite ignores, saying why."""
    return [f"{flag} ignored: {IGNORED[_long(flag)][1]}" for flag in dict.fromkeys(args.ignored_flags)]


def refusal(args):
    """Why the command line cannot run as asked, or None."""
    if args.gloo:
        return "--gloo: hvdlite runs on MPI only (drop --gloo; hvdliterun starts the job through mpiexec)"
    if args.jsrun:
        return ("--jsrun: start the job with jsrun itself (jsrun ... python train.py): hvdlite takes ranks and hosts "
                "from MPI, whoever started it")
    return None


def tcp_variables(environ):
    """The variables --tcp sets on the ranks: those of TCP_VARIABLES the user has not set."""
    return {name: value for name, value in TCP_VARIABLES.items() if name not in environ}


def _long(flag):
    return next((long for long, short in IGNORED_SHORT.items() if short == flag), flag)
