"""Error paths: each must raise on every rank with a message naming the tensor and the ranks.

Run with HVDLITE_STALL_CHECK_TIME_SECONDS=1 and HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=3.
"""

import numpy as np
from mpi4py import MPI

import hvdlite as hvd
from hvdlite._native import ffi, lib

from expectations import expect_error


def check_mismatches(rank, size):
    expect_error(hvd.HvdliteError, ["'bad.shape'", "rank 0 sent [2]", "rank 1 sent [3]"],
                 hvd.allreduce, np.zeros(rank + 2), name="bad.shape")
    dtype = np.float32 if rank == 0 else np.float64
    expect_error(hvd.HvdliteError, ["data types", "'bad.dtype'", "rank 0 sent float32", "rank 1 sent float64"],
                 hvd.allreduce, np.zeros(3, dtype=dtype), name="bad.dtype")
    expect_error(hvd.HvdliteError, ["reduce ops", "'bad.op'", "rank 0 sent sum", "rank 1 sent max"],
                 hvd.allreduce, np.zeros(3), name="bad.op", op=hvd.Sum if rank == 0 else hvd.Max)
    expect_error(hvd.HvdliteError, ["root ranks", "'bad.root'"],
                 hvd.broadcast, np.zeros(3), root_rank=0 if rank == 0 else 1, name="bad.root")
    expect_error(hvd.HvdliteError, ["prescale", "'bad.scale'"],
                 hvd.allreduce, np.zeros(3), name="bad.scale", prescale_factor=1.0 + rank)
    expect_error(hvd.HvdliteError, ["all but the first dimension", "'bad.gather'"],
                 hvd.allgather, np.zeros((2, rank + 1)), name="bad.gather")
    expect_error(hvd.HvdliteError, ["collective operations", "'bad.kind'", "allreduce", "broadcast"],
                 hvd.allreduce if rank == 0 else hvd.broadcast, np.zeros(3), *(() if rank == 0 else (0,)),
                 name="bad.kind")
    # One bad member fails the grouped call on every rank, once the whole group is done (one wait for all).
    expect_error(hvd.HvdliteError, ["'grp.bad.1'", "rank 0 sent [2]", "rank 1 sent [3]"],
                 hvd.grouped_allreduce, [np.ones(2), np.zeros(rank + 2), np.ones(4)], name="grp.bad", op=hvd.Sum)
    # The same names work afterwards: errors are not cached.
    assert np.allclose(hvd.allreduce(np.ones(2), name="bad.shape", op=hvd.Sum), size)
    grouped = hvd.grouped_allreduce([np.ones(2), np.ones(3), np.ones(4)], name="grp.bad", op=hvd.Sum)
    assert [o.shape for o in grouped] == [(2,), (3,), (4,)] and all(np.allclose(o, size) for o in grouped)


def check_local_errors(rank):
    expect_error(ValueError, ["bool", "'flags'"], hvd.allreduce, np.ones(3, dtype=bool), name="flags")
    expect_error(TypeError, ["complex128"], hvd.allreduce, np.ones(3, dtype=np.complex128), name="cplx")
    expect_error(ValueError, ["floating-point", "'ints'"], hvd.allreduce, np.ones(3, dtype=np.int32),
                 name="ints", prescale_factor=2.0)
    expect_error(ValueError, ["root rank"], hvd.broadcast, np.ones(3), root_rank=99, name="far")
    expect_error(NotImplementedError, ["Adasum"], hvd.allreduce, np.ones(3), op=hvd.Adasum)
    expect_error(ValueError, ["op parameter supersedes average"], hvd.allreduce, np.ones(3), op=hvd.Sum, average=True)
    expect_error(ValueError, ["splits"], hvd.alltoall, np.ones(4), splits=[1, 1, 1, 1, 1][:hvd.size() + 1])


def check_duplicate_names(rank, size):
    # A name only this rank submits stays in flight until the others submit it too.
    mine = hvd.allreduce_async(np.ones(2), name=f"dup.{rank}", op=hvd.Sum)
    expect_error(ValueError, [f"'dup.{rank}'", "already in flight"], hvd.allreduce_async, np.ones(2), name=f"dup.{rank}")
    others = [hvd.allreduce_async(np.ones(2), name=f"dup.{r}", op=hvd.Sum) for r in range(size) if r != rank]
    for h in [mine] + others:
        assert np.allclose(hvd.synchronize(h), size)


def check_stall(rank, size):
    # Slow path: only rank 0 submits; it fails after the stall shutdown time, naming the missing ranks.
    if rank == 0:
        missing = ", ".join(str(r) for r in range(1, size))
        expect_error(hvd.HvdliteError, ["Stalled", "'lonely'", f"[{missing}]"], hvd.allreduce, np.ones(2), name="lonely")
        buffer = ffi.new("char[]", 4096)
        lib.hvdlite_last_warning(buffer, 4096)
        warning = ffi.string(buffer).decode()
        assert "'lonely'" in warning and f"missing ranks: [{missing}]" in warning, warning
    MPI.COMM_WORLD.Barrier()  # not hvd.barrier(): it would stall behind rank 0 too
    # Fast path: the name is cached first, then only rank 0 submits it again.
    for _ in range(2):
        hvd.allreduce(np.ones(2), name="cached.lonely")
    if rank == 0:
        expect_error(hvd.HvdliteError, ["Stalled", "'cached.lonely'"], hvd.allreduce, np.ones(2), name="cached.lonely")
    MPI.COMM_WORLD.Barrier()


def check_shutdown_fails_pending(rank, size):
    # Rank 0 waits on a tensor nobody else sends; rank 1 shuts down, which must fail it, not hang it.
    if rank == 0:
        expect_error(hvd.HvdliteError, ["shut down"], hvd.allreduce, np.ones(2), name="orphan")
    elif rank == 1:
        hvd.shutdown()
    hvd.shutdown()
    hvd.shutdown()  # idempotent
    assert not hvd.is_initialized()
    expect_error(ValueError, ["not been initialized"], hvd.rank)
    expect_error(ValueError, ["not been initialized"], hvd.allreduce_async, np.ones(1), name="late")
    hvd.init()  # and again after shutdown
    assert np.allclose(hvd.allreduce(np.ones(2), name="again", op=hvd.Sum), size)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_mismatches(rank, size)
    check_local_errors(rank)
    check_duplicate_names(rank, size)
    check_stall(rank, size)
    check_shutdown_fails_pending(rank, size)
    print(f"rank {rank}: WORKER OK", flush=True)


if __name__ == "__main__":
    main()
