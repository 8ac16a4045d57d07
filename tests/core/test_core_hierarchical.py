"""The hierarchical all-reduce (reduce-scatter within each host, all-reduce of each share across hosts, all-gather
within each host) on every rank against a float64 reference: fused batches of every dtype and op, single tensors
staged and read in place, in place and not; with the direct algorithm within each host and with the ring (where
the ranks of a host cannot read each other's memory); shares crossing hosts by the ring and by MPI_Allreduce.
Results are bitwise equal on all ranks.

On one host it degenerates to its local halves; across simulated hosts (pytest --hosts 2x2, blocks or
round-robin, or --hosts 2x1) every step runs. Forced, it also serves fused batches that other process sets'
traffic interleaves with (they use the ring).
"""
import resource

import numpy as np
import pytest

import hvdlite as hvd
from harness.multirank import job_rank
from harness.numpy_groups import OPS, reduce_group_and_check, same_bytes_everywhere
from harness.reference import check_close, rank_input, reduce_reference

pytestmark = [pytest.mark.ranks(2, 4),
              pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20, HVDLITE_ALLREDUCE_ALGORITHM="hierarchical",
                                  # Shares of 4 KiB and more cross hosts by the ring, smaller ones by MPI.
                                  HVDLITE_AUTO_CROSS_HOST_RING_MIN_BYTES=4096, HVDLITE_RING_SEGMENT_BYTES=65536),
              pytest.mark.across_hosts, pytest.mark.openmpi, pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True, params=["direct within host", "ring within host"])
def within_host(request):
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if request.param == "ring within host" and job_rank() == 0:
        # No file descriptors during init: rank 0 cannot make the shared staging buffer that init's probe maps,
        # so no host uses the direct algorithm (every rank agrees on the probe's verdict).
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, limits[1]))
    try:
        hvd.init()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    return request.param


def reduce_and_check(label, dtype, op_name, sizes, in_place_every=2):
    return reduce_group_and_check(label, dtype, op_name, sizes, "hierarchical allreduce", in_place_every)


def test_fused_batches_of_every_dtype_and_op():
    rng = np.random.default_rng(11)  # the same sizes on every rank
    reduce_and_check("small", "float32", "sum", [100, 200, 300])
    # Hundreds of tensors of odd sizes: shares cut tensors in two, on each host and across hosts.
    reduce_and_check("many", "float32", "sum", list(rng.integers(1, 3000, size=400)))
    for dtype in ("uint8", "int32", "int64", "float16", "bfloat16", "float64"):
        for op_name in OPS:
            sizes = [5, 9, 13] if op_name == "product" else list(rng.integers(1, 5000, size=30))
            reduce_and_check(f"mix.{dtype}.{op_name}", dtype, op_name, sizes)
    # The same names again: the response cache's fast path feeds the same batches.
    reduce_and_check("many", "float32", "sum", list(np.random.default_rng(11).integers(1, 3000, size=400)))


def test_single_tensors_small_staged_and_read_in_place():
    # Counts no rank count divides; up to 4 MiB the direct algorithm stages a tensor, above it reads in place.
    for n in (0, 1, 3, 1001, 300_007, 1_100_003):
        reduce_and_check(f"single.{n}", "float32", "sum", [n], in_place_every=1)
        reduce_and_check(f"single.out.{n}", "float64", "average", [n], in_place_every=2)


def test_a_scaled_tensor_goes_through_the_fusion_buffer():
    rank, size = hvd.rank(), hvd.size()
    x = rank_input("float32", (5000,), rank, "sum", "scaled")
    out = hvd.allreduce(x, name="scaled", op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    expected = reduce_reference([rank_input("float32", (5000,), r, "sum", "scaled") for r in range(size)], "sum",
                                prescale=0.5, postscale=3.0)
    check_close("scaled", np.asarray(out), expected, "float32", "hierarchical allreduce")
    same_bytes_everywhere(out, "scaled")


def test_other_process_sets_use_the_ring_between_global_batches():
    rank, size = hvd.rank(), hvd.size()
    evens = hvd.add_process_set(list(range(0, size, 2)))
    try:
        for step in range(3):
            x = rank_input("float64", (20_000,), rank, "sum", ("global", step))
            h = hvd.allreduce_async(x, name=f"global.{step}", op=hvd.Sum)
            if evens.included():
                y = rank_input("float64", (20_000,), rank, "sum", ("evens", step))
                got = hvd.allreduce(y, name=f"evens.{step}", op=hvd.Sum, process_set=evens)
                expected = reduce_reference([rank_input("float64", (20_000,), r, "sum", ("evens", step))
                                             for r in range(0, size, 2)], "sum")
                check_close(f"evens.{step}", np.asarray(got), expected, "float64", "process set allreduce")
            got = hvd.synchronize(h)
            expected = reduce_reference([rank_input("float64", (20_000,), r, "sum", ("global", step))
                                         for r in range(size)], "sum")
            check_close(f"global.{step}", np.asarray(got), expected, "float64", "hierarchical allreduce")
    finally:
        hvd.barrier()
        hvd.remove_process_set(evens)
