"""THE one configuration table of hvdlite.

Every setting is listed once in SETTINGS: its HVDLITE_* environment variable, the HOROVOD_* name accepted as an
alias (the HVDLITE_* name wins when both are set), default, meaning, and the hvdliterun flag that sets it.
`resolve()` reads and validates the environment, `to_native()` fills the C struct `hvdlite_config`
(native/include/hvdlite.h), and `markdown_table()` renders the table that docs/configuration.md shows.
"""
import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from .native_header import enum_choices

MiB = 1024 * 1024

# The choices of the settings that hand the core an enum, read from the header's enums: a choice's index is the
# enum's value, so a value added to the header is a choice here.
LOG_LEVELS = enum_choices("hvdlite_log_level")                       # trace, debug, info, warning, error, fatal
ALLREDUCE_ALGORITHMS = enum_choices("hvdlite_allreduce_algorithm")   # auto, ring, mpi, direct, hierarchical
OVERLAP_MODES = enum_choices("hvdlite_overlap")                      # auto, on, off
CARRIED_ROUNDS_MODES = enum_choices("hvdlite_carried_rounds")        # auto, on, off
CROSS_HOST_TRANSPORTS = enum_choices("hvdlite_cross_host_transport")  # tcp, mpi

_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off", "")


def _parse_non_negative_int(text):
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError("expected an integer >= 0")
    return value


def _parse_positive_int(text):
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError("expected an integer >= 1")
    return value


def _parse_non_negative_float(text):
    try:
        value = float(text.strip())
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):  # also rejects nan
        raise ValueError("expected a finite number >= 0")
    return value


def _parse_bool(text):
    word = text.strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ValueError(f"expected one of {', '.join(_TRUE_WORDS + _FALSE_WORDS[:-1])}")


def _choice_parser(choices):
    def parse(text):
        word = text.strip().lower()
        if word not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return word
    return parse


def _parse_text(text):
    return text


@dataclass(frozen=True)
class Setting:
    """One tunable: where it is read from, what it means, and how the launcher sets it."""
    name: str                      # key in resolve()'s dict
    env: str                       # HVDLITE_* variable
    alias: Optional[str]           # HOROVOD_* variable accepted too
    default: object
    type_name: str                 # shown in the table: bytes, int, float, bool, choice, path
    parse: Callable[[str], object]
    meaning: str
    flag: Optional[str] = None     # hvdliterun flag
    flag_scale: int = 1            # flag value times this gives the env value (MiB flags -> bytes)
    choices: Sequence[str] = ()
    default_text: Optional[str] = None
    alias_parse: Optional[Callable[[str], object]] = None  # the alias's own meaning, where it differs

    def _parse_from(self, variable, raw):
        parse = self.alias_parse if variable == self.alias and self.alias_parse else self.parse
        return parse(raw)

    def read(self, environ=None):
        """This setting's value from environ (HVDLITE_* first, then the HOROVOD_* alias, then the default)."""
        environ = os.environ if environ is None else environ
        for variable in (self.env, self.alias):
            if variable and variable in environ:
                raw = environ[variable]
                try:
                    return self._parse_from(variable, raw)
                except ValueError as error:
                    raise ValueError(f"{variable}={raw!r} is invalid ({self.meaning}): {error}") from None
        return self.default

    def flag_to_env(self, value):
        """The environment value that the launcher flag's value stands for (validated like the env var)."""
        if self.type_name == "bool":
            return "1" if value else "0"
        if self.flag_scale != 1:
            text = str(int(round(float(value) * self.flag_scale)))
        else:
            text = str(value)
        try:
            self.parse(text)
        except ValueError as error:
            raise ValueError(f"{self.flag} {value!r} is invalid: {error}") from None
        return text


SETTINGS = (
    Setting("fusion_threshold_bytes", "HVDLITE_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", 64 * MiB, "bytes",
            _parse_non_negative_int, "Largest fused all-reduce buffer in bytes; 0 disables fusion",
            flag="--fusion-threshold-mb", flag_scale=MiB, default_text="67108864 (64 MiB)"),
    Setting("cycle_time_ms", "HVDLITE_CYCLE_TIME", "HOROVOD_CYCLE_TIME", 1.0, "float",
            _parse_non_negative_float, "Negotiation rounds for async work start on multiples of this many "
            "milliseconds (the same instants on every rank); synchronous work starts at once. While no rank has "
            "work none run, and an idle rank looks for a peer's wake less often the longer it has been idle (at "
            "most every 10 ms)",
            flag="--cycle-time-ms"),
    Setting("cache_capacity", "HVDLITE_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", 1024, "int",
            _parse_non_negative_int,
            "Response cache entries for the fast negotiation path: keep it above the number of tensors a step "
            "reduces (least recently used are evicted, so more than that send them through the slow path, and rank 0 warns once); "
            "0 disables it",
            flag="--cache-capacity"),
    Setting("stall_check_seconds", "HVDLITE_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", 60.0,
            "float", _parse_non_negative_float,
            "Seconds before tensors that some ranks never submitted are reported; 0 disables",
            flag="--stall-check-time-seconds"),
    Setting("stall_shutdown_seconds", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
            0.0, "float", _parse_non_negative_float,
            "Seconds before stalled tensors fail with an error; 0 never", flag="--stall-shutdown-time-seconds"),
    Setting("deadlock_seconds", "HVDLITE_DEADLOCK_TIMEOUT_SECONDS", None, 300.0, "float",
            _parse_non_negative_float,
            "Seconds that every rank may wait, each for collectives another rank never submitted (the ranks run "
            "different collectives: a deadlock), before hvdlite shuts down on every rank and each waiting call "
            "fails with the stall report; a rank that is computing (no call waiting) never counts; needs the stall "
            "inspector; 0 never",
            flag="--deadlock-timeout-seconds"),
    Setting("stall_check_disable", "HVDLITE_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_DISABLE", False, "bool",
            _parse_bool, "Turn the stall inspector off", flag="--no-stall-check"),
    Setting("progress_timeout_seconds", "HVDLITE_PROGRESS_TIMEOUT_SECONDS", None, 120.0, "float",
            _parse_non_negative_float,
            "A collective that makes no progress for this many seconds (a peer's host lost power or its network) "
            "ends its process, and so the job, with an error saying so; a step of progress is a round, a batch, a "
            "ring segment or 64 MiB of a broadcast (one allgather or alltoall must fit in it); 0 never",
            flag="--progress-timeout-seconds"),
    Setting("allreduce_algorithm", "HVDLITE_ALLREDUCE_ALGORITHM", "HOROVOD_HIERARCHICAL_ALLREDUCE", "auto", "choice",
            _choice_parser(ALLREDUCE_ALGORITHMS),
            "All-reduce algorithm: auto picks by message size and topology (MPI_Allreduce for small ones; on one "
            "host direct where the ranks may read each other's memory, else ring; across hosts hierarchical "
            "where every host has as many ranks, else ring); ring, mpi, direct or hierarchical force one "
            "(HOROVOD_HIERARCHICAL_ALLREDUCE=1 means hierarchical)",
            flag="--allreduce-algorithm", choices=ALLREDUCE_ALGORITHMS,
            alias_parse=lambda text: "hierarchical" if _parse_bool(text) else "auto"),
    Setting("ring_segment_bytes", "HVDLITE_RING_SEGMENT_BYTES", None, 4 * MiB, "bytes", _parse_non_negative_int,
            "Pipelining segment of the ring all-reduce in bytes (measured: docs/benchmarks.md)",
            default_text="4194304 (4 MiB)"),
    Setting("auto_ring_min_bytes", "HVDLITE_AUTO_RING_MIN_BYTES", None, 256 * 1024, "bytes",
            _parse_non_negative_int, "With auto, messages from this many bytes use direct (or the ring), "
            "smaller ones MPI_Allreduce (measured: docs/benchmarks.md)", default_text="262144 (256 KiB)"),
    Setting("auto_cross_host_ring_min_bytes", "HVDLITE_AUTO_CROSS_HOST_RING_MIN_BYTES", None, -1, "bytes",
            _parse_non_negative_int, "Across hosts, with auto, messages from this many bytes use the hierarchical "
            "all-reduce (or the ring), smaller ones MPI_Allreduce; the hierarchical one's step across hosts uses "
            "the ring from this many bytes too. By default 256 KiB where every host has one rank (the ring across "
            "hosts then reads the tensors where they are) and 1 MiB where hosts have more (below that the halves "
            "within a host cost more than they save). Measured across hosts at 1 Gbit/s: "
            "docs/decisions/allreduce-across-hosts.md; bench/multihost.py measures it on your links",
            default_text="262144 (256 KiB) with one rank per host, else 1048576 (1 MiB)"),
    Setting("eager_max_bytes", "HVDLITE_EAGER_MAX_BYTES", None, 64 * 1024, "bytes", _parse_non_negative_int,
            "Small all-reduces that repeat round after round travel inside the negotiation round, when all that "
            "is predicted for a round fits in this many bytes (across hosts at most 16 KiB, measured); 0 disables "
            "(docs/architecture.md)", default_text="65536 (64 KiB)"),
    Setting("cross_host_transport", "HVDLITE_CROSS_HOST_TRANSPORT", None, "tcp", "choice",
            _choice_parser(CROSS_HOST_TRANSPORTS),
            "What the ring across hosts runs on: tcp, hvdlite's own connections between the hosts, whose waits "
            "block instead of keeping a core busy while the link is the limit (MPI's where they cannot be opened, "
            "with a warning); or mpi, MPI's point-to-point", choices=CROSS_HOST_TRANSPORTS),
    Setting("network_interfaces", "HVDLITE_NETWORK_INTERFACES", None, "", "names", _parse_text,
            "Network interfaces (comma-separated) the TCP ring across hosts may use; hvdliterun's "
            "--network-interface sets it; empty: any", default_text="(any)"),
    Setting("round_doubling_min_hosts", "HVDLITE_ROUND_DOUBLING_MIN_HOSTS", None, 8, "int", _parse_positive_int,
            "From this many hosts the negotiation round crosses hosts in log2(hosts) steps over connections at "
            "doubling distances, below it around the ring of TCP connections (measured: "
            "docs/decisions/rounds-in-log-steps.md)"),
    Setting("carried_rounds", "HVDLITE_CARRIED_ROUNDS", None, "auto", "choice", _choice_parser(CARRIED_ROUNDS_MODES),
            "Whether a negotiation round may ride in the last all-reduce of the round before it, so that a step whose "
            "tensors keep coming exchanges no separate round: on, off, or auto (across hosts, where a round costs "
            "the link's latency); every rank must use the same (docs/architecture.md)", choices=CARRIED_ROUNDS_MODES),
    Setting("overlap", "HVDLITE_OVERLAP", None, "auto", "choice", _choice_parser(OVERLAP_MODES),
            "Run async collectives while ranks still compute (on), or hold them until every rank waits on one "
            "(off; at most 100 ms); auto: on where a node has more cores than ranks (docs/architecture.md)",
            choices=OVERLAP_MODES),
    Setting("log_level", "HVDLITE_LOG_LEVEL", "HOROVOD_LOG_LEVEL", "warning", "choice", _choice_parser(LOG_LEVELS),
            "Log level", flag="--log-level", choices=LOG_LEVELS),
    Setting("timeline_path", "HVDLITE_TIMELINE", "HOROVOD_TIMELINE", "", "path", _parse_text,
            "Chrome trace file written by rank 0 from the start; empty for none", flag="--timeline-filename",
            default_text="(none)"),
    Setting("timeline_mark_cycles", "HVDLITE_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", False, "bool",
            _parse_bool, "Mark negotiation cycles in the timeline", flag="--timeline-mark-cycles"),
    Setting("autotune", "HVDLITE_AUTOTUNE", "HOROVOD_AUTOTUNE", False, "bool", _parse_bool,
            "Tune fusion threshold and cycle time online", flag="--autotune"),
    Setting("autotune_log", "HVDLITE_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", "", "path", _parse_text,
            "CSV file of autotune trials; empty for none", flag="--autotune-log-file", default_text="(none)"),
    Setting("autotune_warmup_samples", "HVDLITE_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 2, "int",
            _parse_non_negative_int, "Autotune: first samples measured but not used (start-up noise)",
            flag="--autotune-warmup-samples"),
    Setting("autotune_steps_per_sample", "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 20,
            "int", _parse_positive_int, "Autotune: negotiation rounds that carried work, per sample of a setting",
            flag="--autotune-steps-per-sample"),
    Setting("elastic_commit_dir", "HVDLITE_ELASTIC_COMMIT_DIR", None, "", "path", _parse_text,
            "Where each host keeps an elastic job's commits (hvdlite.elastic); {host} stands for the host's name",
            flag="--elastic-commit-dir", default_text="(tmp)/hvdlite-elastic-JOB"),
    Setting("nccl_library", "HVDLITE_NCCL_LIBRARY", None, "", "path", _parse_text,
            "The NCCL library to load (libnccl.so.2), instead of looking for one (hvdlite.gpu_status())",
            default_text="(searched)"),
    Setting("torch_extension_dir", "HVDLITE_TORCH_EXTENSION_DIR", None, "", "path", _parse_text,
            "Where the torch.distributed backend is compiled and kept, a folder per PyTorch version and "
            "installation inside (`python -m hvdlite.torch.build` fills it ahead of use)",
            default_text="~/.cache/hvdlite"),
    Setting("torch_build_timeout_seconds", "HVDLITE_TORCH_BUILD_TIMEOUT_SECONDS", None, 900.0, "float",
            _parse_non_negative_float,
            "How long a process waits for another process's build of the torch.distributed backend before it "
            "fails saying so; 0 waits as long as the build takes"),
)

SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}


def resolve(environ=os.environ):
    """All settings as {name: value}, read from environ. Raises ValueError naming the variable and bad value."""
    return {setting.name: setting.read(environ) for setting in SETTINGS}


def to_native(ffi, settings=None):
    """A filled `hvdlite_config *` and the C strings it points to, returned as (config, keepalive).

    Hold keepalive for as long as the core may read the struct's strings (hvdlite_init copies what it keeps).
    """
    settings = resolve() if settings is None else settings
    config = ffi.new("hvdlite_config *")
    config.fusion_threshold_bytes = settings["fusion_threshold_bytes"]
    config.cycle_time_ms = settings["cycle_time_ms"]
    config.cache_capacity = settings["cache_capacity"]
    config.stall_check_seconds = 0.0 if settings["stall_check_disable"] else settings["stall_check_seconds"]
    config.stall_shutdown_seconds = settings["stall_shutdown_seconds"]
    config.deadlock_seconds = settings["deadlock_seconds"]
    config.progress_timeout_seconds = settings["progress_timeout_seconds"]
    config.allreduce_algorithm = ALLREDUCE_ALGORITHMS.index(settings["allreduce_algorithm"])
    config.ring_segment_bytes = settings["ring_segment_bytes"]
    config.auto_ring_min_bytes = settings["auto_ring_min_bytes"]
    config.auto_cross_host_ring_min_bytes = settings["auto_cross_host_ring_min_bytes"]
    config.eager_max_bytes = settings["eager_max_bytes"]
    config.overlap = OVERLAP_MODES.index(settings["overlap"])
    config.log_level = LOG_LEVELS.index(settings["log_level"])
    config.timeline_mark_cycles = int(settings["timeline_mark_cycles"])
    config.autotune = int(settings["autotune"])
    config.autotune_warmup_samples = settings["autotune_warmup_samples"]
    config.autotune_steps_per_sample = settings["autotune_steps_per_sample"]
    config.cross_host_transport = CROSS_HOST_TRANSPORTS.index(settings["cross_host_transport"])
    config.carried_rounds = CARRIED_ROUNDS_MODES.index(settings["carried_rounds"])
    config.round_doubling_min_hosts = settings["round_doubling_min_hosts"]
    timeline_path = ffi.new("char[]", os.fsencode(settings["timeline_path"]))
    autotune_log = ffi.new("char[]", os.fsencode(settings["autotune_log"]))
    network_interfaces = ffi.new("char[]", settings["network_interfaces"].encode())
    config.timeline_path = timeline_path
    config.autotune_log = autotune_log
    config.network_interfaces = network_interfaces
    return config, (timeline_path, autotune_log, network_interfaces)


def _default_text(setting):
    if setting.default_text is not None:
        return setting.default_text
    if isinstance(setting.default, bool):
        return "1" if setting.default else "0"
    if isinstance(setting.default, float):
        return f"{setting.default:g}"
    return str(setting.default)


def _flag_text(setting):
    if not setting.flag:
        return ""
    if setting.type_name == "bool":
        return f"`{setting.flag}`"
    unit = " (MiB)" if setting.flag_scale == MiB else ""
    return f"`{setting.flag} VALUE`{unit}"


def markdown_table():
    """The configuration table in Markdown, as docs/configuration.md shows it."""
    lines = ["| Variable | Horovod alias | Default | Values | hvdliterun flag | Meaning |",
             "|---|---|---|---|---|---|"]
    for setting in SETTINGS:
        values = " \\| ".join(setting.choices) if setting.choices else setting.type_name
        alias = f"`{setting.alias}`" if setting.alias else ""
        lines.append(f"| `{setting.env}` | {alias} | {_default_text(setting)} | {values} | {_flag_text(setting)} "
                     f"| {setting.meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m hvdlite.config prints the table for docs/configuration.md
    print(markdown_table(), end="")
