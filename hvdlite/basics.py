"""Lifecycle and topology: init, shutdown, rank and size queries, timeline control."""
import atexit

from . import _tensor_calls, build_info, config, mpi_leftovers, mpi_start
from ._native import MPI, error_buffer, error_text, ffi, lib
from .logging import get_logger
from .logging import set_rank as _set_log_rank
from .errors import HvdliteError
from .process_sets import _refresh_global, add_process_set

_atexit_registered = False
_init_comm = None  # keeps a communicator built from a rank list alive


def _mpi_comm_address(comm):
    """The address of the MPI_Comm inside an mpi4py communicator (or NULL for MPI_COMM_WORLD)."""
    global _init_comm
    if comm is None:
        return ffi.NULL
    if isinstance(comm, (list, tuple)):  # Horovod accepts ranks of MPI_COMM_WORLD
        group = MPI.COMM_WORLD.Get_group().Incl(sorted(comm))
        comm = MPI.COMM_WORLD.Create_group(group)
        if comm == MPI.COMM_NULL:
            raise ValueError(f"rank {MPI.COMM_WORLD.Get_rank()} is not in the ranks given to init(): {sorted(comm)}")
    _init_comm = comm
    return ffi.cast("void *", MPI._addressof(comm))


def init(comm=None, process_sets=None):
    """Starts hvdlite on this rank: every rank of ``comm`` (an mpi4py communicator, a list of ranks of
    MPI_COMM_WORLD, or None for all) calls it. Calling it again while running does nothing."""
    global _atexit_registered
    if _tensor_calls.is_initialized():
        return
    mpi_start.start_for_init(MPI)
    settings = config.resolve()
    native_config, keepalive = config.to_native(ffi, settings)
    buffer = error_buffer()
    if lib.hvdlite_init(native_config, _mpi_comm_address(comm), buffer, len(buffer)) != 0:
        raise HvdliteError(f"hvdlite init failed: {error_text(buffer)}")
    del keepalive
    wrong_launcher = build_info.check_launcher(MPI.Get_library_version(), MPI.COMM_WORLD.Get_size())
    if wrong_launcher:
        lib.hvdlite_shutdown()
        raise HvdliteError(wrong_launcher)
    _refresh_global(lib.hvdlite_size())
    _set_log_rank(lib.hvdlite_rank())  # Python log lines carry the rank the core reports
    if lib.hvdlite_local_rank() == 0:
        removed = mpi_leftovers.remove_orphaned_segments()
        if removed:
            get_logger().info("removed %d shared-memory segments that killed MPI jobs left in /dev/shm",
                              len(removed))
    if not _atexit_registered:
        # Runs before MPI is finalized: mpi4py finalizes from a C exit hook (Py_AtExit), after every atexit function.
        atexit.register(shutdown)
        _atexit_registered = True
    for process_set in process_sets or ():
        add_process_set(process_set)


def shutdown():
    """Stops the background thread on every rank; pending requests fail. Safe to call twice."""
    lib.hvdlite_shutdown()


def is_initialized():
    return _tensor_calls.is_initialized()


# _require_init(): raises ValueError unless hvdlite has been initialized (the extension's check, which hvd.allreduce
# makes in C too: one message).
_require_init = _tensor_calls.require_init


def _query(function):
    def query():
        _require_init()
        return function()
    query.__name__ = function.__name__.replace("hvdlite_", "")
    return query


rank = _query(lib.hvdlite_rank)
size = _query(lib.hvdlite_size)
local_rank = _query(lib.hvdlite_local_rank)
local_size = _query(lib.hvdlite_local_size)
cross_rank = _query(lib.hvdlite_cross_rank)
cross_size = _query(lib.hvdlite_cross_size)
rank.__doc__ = "This process's rank in the job."
size.__doc__ = "Number of ranks in the job."


def mpi_threads_supported():
    _require_init()
    return bool(lib.hvdlite_mpi_threads_supported())


def is_homogeneous():
    """True when every node runs the same number of ranks."""
    _require_init()
    local_sizes = MPI.COMM_WORLD.allgather(local_size()) if _init_comm is None else _init_comm.allgather(local_size())
    return len(set(local_sizes)) == 1


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """True where GPU tensors go through NCCL (the CUDA driver sees a GPU and NCCL was found at run time)."""
    from .gpu import collectives_available
    return collectives_available()


def cuda_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome trace to file_path (on rank 0), at run time."""
    _require_init()
    if lib.hvdlite_start_timeline(file_path.encode(), int(bool(mark_cycles))) != 0:
        raise HvdliteError("cannot start the timeline: hvdlite is not running")


def stop_timeline():
    _require_init()
    lib.hvdlite_stop_timeline()
