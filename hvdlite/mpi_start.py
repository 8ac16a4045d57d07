"""When this process starts MPI, and how.

A process that an MPI launcher started (hvdliterun, mpiexec, a scheduler's PMI) starts MPI when hvdlite is
imported, through mpi4py, so that a program may use mpi4py between importing hvdlite and ``hvd.init()``. A process
that torch's launchers started (torchrun; ``torch.multiprocessing.spawn`` and other multiprocessing children; any
launcher that sets torch's RANK and WORLD_SIZE and none of an MPI launcher's variables) is not yet one rank of an
MPI job when it imports hvdlite: its MPI starts once the ranks meet, in ``dist.init_process_group("hvdlite")``
through the store torch gives the backend, or in ``hvd.init()`` through the store of torchrun's agent (pmi/). A
process of torch's that meets no one (a data loader worker, a run of one) starts MPI alone at ``hvd.init()``.
"""
import multiprocessing
import os
import sys

from .logging import launcher_rank, launcher_size


def started_by_torch(environ=None, process_name=None):
    """Whether torch's launchers (or multiprocessing) started this process rather than an MPI launcher."""
    environ = os.environ if environ is None else environ
    if launcher_rank(environ) is not None or launcher_size(environ) is not None:  # an MPI launcher's variables
        return False
    if "TORCHELASTIC_RUN_ID" in environ or ("RANK" in environ and "WORLD_SIZE" in environ):
        return True  # torchrun's worker, or a rank that a launcher of the user's started for torch's env://
    # A multiprocessing child has its name while it imports the main module (its parent_process() comes later).
    process_name = multiprocessing.current_process().name if process_name is None else process_name
    return process_name != "MainProcess"


def started_by_slurms_pmi(environ=None):
    """Whether srun started this process with Slurm's own PMI server (srun --mpi=pmi2), whose job id is Slurm's
    job and step (an MPI launcher's PMI inside a step, such as hydra's under hvdliterun, names its job otherwise)."""
    environ = os.environ if environ is None else environ
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    return bool(job and step) and environ.get("PMI_JOBID") == f"{job}.{step}"


# MPICH's network layer under Slurm's PMI server. MPICH's wheels speak PMI-1 to it, and cut a long address (UCX's)
# into values as long as Slurm says a value may be; the line that carries such a value is longer than Slurm reads,
# so the address arrives garbled (Slurm logs "mpi/pmi2: value not properly terminated in client request"; MPI_Init
# fails, or UCX asserts). libfabric's addresses fit in one short value.
SLURM_PMI_NETWORK_LAYER = {"MPIR_CVAR_CH4_NETMOD": "ofi"}


def import_mpi():
    """mpi4py's MPI: started now, or, in a process that torch's launchers started, left to start later."""
    if "mpi4py.MPI" not in sys.modules and started_by_torch():
        import mpi4py
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = True  # at exit, though mpi4py did not start it
    if "mpi4py.MPI" not in sys.modules and started_by_slurms_pmi():
        for name, value in SLURM_PMI_NETWORK_LAYER.items():
            os.environ.setdefault(name, value)  # a layer the user chose is kept
    from mpi4py import MPI
    return MPI


def join_through_store(MPI, store, rank, size, timeout_seconds):
    """Starts MPI (mpi4py's, not started) as rank ``rank`` of ``size`` processes meeting through ``store`` (torch's
    Store)."""
    from . import build_info
    from .pmi.join import join
    family = build_info.mpi_family(MPI.Get_library_version())
    if family == "Open MPI":  # its processes take their job from PMIx, which pmi/ does not serve
        from .errors import HvdliteError
        raise HvdliteError(
            f"rank {rank} of {size} processes that torch's launcher started: they can become one MPI job with an MPI "
            "of MPICH's family (MPICH, Intel MPI, MVAPICH), not with Open MPI, which hvdlite runs on here; start the "
            "job with hvdliterun instead")
    join(store, rank, size, timeout_seconds, lambda: _start_mpi(MPI))


def start_for_init(MPI):
    """hvd.init()'s start of mpi4py's MPI where it has not started: through torchrun's agent store for a rank of
    many that torchrun started, else alone."""
    if MPI.Is_initialized():
        return
    environ = os.environ
    size = int(environ.get("WORLD_SIZE") or 1)
    if size == 1:
        _start_mpi(MPI)
        return
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not environ.get("MASTER_ADDR"):
        from .errors import HvdliteError
        raise HvdliteError(
            f"this process is rank {environ.get('RANK')} of {size} that torch's launcher started, without a store "
            "of torchrun's agent to meet the others through: call dist.init_process_group(\"hvdlite\") before "
            "hvd.init() (its ranks become one MPI job there), or start the job with hvdliterun")
    from torch.distributed import TCPStore
    from torch.distributed.constants import default_pg_timeout
    agent_store = TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), is_master=False,
                           timeout=default_pg_timeout)
    join_through_store(MPI, agent_store, int(environ["RANK"]), size, default_pg_timeout.total_seconds())


def _start_mpi(MPI):
    import mpi4py
    levels = {"single": MPI.THREAD_SINGLE, "funneled": MPI.THREAD_FUNNELED, "serialized": MPI.THREAD_SERIALIZED,
              "multiple": MPI.THREAD_MULTIPLE}
    MPI.Init_thread(levels[mpi4py.rc.thread_level])
