"""hvdlite as a torch.distributed backend: ``dist.init_process_group("hvdlite")`` in a job that hvdliterun or mpiexec
started, and DDP, FSDP2, ZeroRedundancyOptimizer, DeviceMesh, Lightning or Accelerate code runs its collectives
on hvdlite's core.

Importing hvdlite.torch registers the backend for CPU and CUDA tensors (CUDA tensors go through the core's NCCL
path; "cpu:hvdlite,cuda:nccl" puts them on torch's NCCL backend instead). Each process group's backend is a C++
``c10d::Backend`` (extension.py) over the group's process set: the world group is hvdlite's global set, a group of
some ranks the set its members ask for. The ranks must be one MPI job: the backend refuses a world that torch's
launchers made of separate processes, saying so. Where torch is given no rendezvous (no MASTER_ADDR / RANK, as
under a plain mpiexec), rank 0 of the MPI job serves torch's store and tells the others where it is
(rendezvous.py).
"""
import datetime

import torch.distributed as dist

BACKEND = "hvdlite"


def _create_backend(options, _backend_options=None):
    """torch.distributed's creator for one process group (its extended API: the group's ranks in the job)."""
    from hvdlite import basics, mpi_start
    from hvdlite._native import MPI
    from hvdlite.process_sets import add_process_set_of_members

    from . import extension

    timeout = options.timeout
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    ranks = [int(r) for r in options.global_ranks_in_group]
    if not ranks and not MPI.Is_initialized():  # processes torch's launchers started: they meet in its store
        mpi_start.join_through_store(MPI, options.store, options.group_rank, options.group_size, seconds)
    if not basics.is_initialized():
        basics.init()
    if not ranks:  # the world group
        if options.group_size != basics.size() or options.group_rank != basics.rank():
            raise RuntimeError(
                f"hvdlite's torch.distributed backend runs on the ranks of one MPI job, as hvdliterun or mpiexec "
                f"starts them: torch asked for rank {options.group_rank} of {options.group_size}, while this process "
                f"is rank {basics.rank()} of an MPI job of {basics.size()}. Processes that torchrun or "
                "torch.multiprocessing.spawn started become one MPI job here only where MPI has not started before "
                "(neither mpi4py imported before hvdlite, nor hvd.init() before init_process_group under "
                "torch.multiprocessing.spawn); or start the script with hvdliterun -np N (it sets torchrun's "
                "variables), see docs/torch_distributed.md")
        ranks = list(range(basics.size()))
        process_set_id = 0
    else:
        process_set = add_process_set_of_members(ranks)
        if sorted(ranks) != ranks or process_set.rank() != options.group_rank:
            raise RuntimeError(f"hvdlite: a process group's ranks must be in ascending order, as new_group sorts "
                               f"them; got {ranks}")
        process_set_id = process_set.process_set_id
    return extension.load().create(options.group_rank, options.group_size, process_set_id, ranks,
                                   str(options.group_id), seconds, _gpu_unavailable())


def _gpu_unavailable():
    """Why CUDA tensors cannot go through the core's NCCL path in this process ("" where they can, or where torch
    has no CUDA, so that no CUDA tensor can come)."""
    import torch

    if not torch.cuda.is_available():
        return ""
    from hvdlite import gpu
    if gpu.collectives_available():
        return ""
    status = gpu.gpu_status()
    missing = status["collectives_reason"].split(": ", 1)[-1]  # "no CUDA driver", "NCCL not found", ...
    return "; ".join(part for part in (missing, status["nccl_reason"] or status["cuda_reason"]) if part)


def register():
    """Registers the "hvdlite" backend with torch.distributed (once; import hvdlite.torch does it)."""
    if not dist.is_available() or hasattr(dist.Backend, BACKEND.upper()):
        return
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["cpu", "cuda"])
    from . import rendezvous
    rendezvous.install()


register()
