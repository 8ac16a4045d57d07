"""Every collective x dtype x op of the core, on 2, 3 and 4 real MPI ranks, against an independent float64
reference: under each all-reduce algorithm, and with fusion and the response cache off or tiny. A cache smaller
than a step's tensors warns once, naming the setting. Across simulated hosts (pytest --hosts 2x2) the same tests
run with the algorithms that work there."""
import os
import socket

import numpy as np
import pytest

import hvdlite as hvd
from harness.numpy_groups import same_bytes_everywhere
from harness.reference import DTYPES, check_close, np_dtype, rank_input, reduce_reference
from hvdlite.testing.simulated_hosts import expected_topology_here, job_layout

pytestmark = [pytest.mark.ranks(3, 2, 4),  # 3 first: odd sizes are where ring and direct all-reduce break
              pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),  # a bug fails fast instead of hanging
              pytest.mark.across_hosts, pytest.mark.openmpi, pytest.mark.sanitize(address=True, thread=True)]
CONFIGURATIONS = {
    **{algorithm: dict(HVDLITE_ALLREDUCE_ALGORITHM=algorithm, HVDLITE_RING_SEGMENT_BYTES=4096)
       for algorithm in ("ring", "mpi", "hierarchical", "auto", *(() if job_layout() else ("direct",)))},
    "no fusion or cache": dict(HVDLITE_FUSION_THRESHOLD=0, HVDLITE_CACHE_CAPACITY=0),
    # Constant eviction: cached bits get reassigned while requests wait on them.
    "tiny cache": dict(HVDLITE_CACHE_CAPACITY=8, HVDLITE_FUSION_THRESHOLD=65536),
}


@pytest.fixture(scope="module", autouse=True,
                params=[pytest.param(name, marks=pytest.mark.hvd_env(**env), id=name)
                        for name, env in CONFIGURATIONS.items()])
def configuration(request):
    hvd.init()
    return request.param

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
SIZES = [0, 1, 7, 13, 4099, 70001]


def test_allreduce_of_every_dtype_op_and_size(rounds=3):
    rank, size = hvd.rank(), hvd.size()
    # Everything submitted async at once: many concurrent handles, fused mixes of dtypes and ops.
    # Later rounds reuse the names, so they take the response cache's fast path.
    for round_ in range(rounds):
        jobs = []
        for dtype in DTYPES:
            for op_name, op in OPS.items():
                for n in SIZES:
                    if op_name == "product" and n > 13:
                        continue
                    # Integers scale too (in float64, truncated, as in Horovod): factors that cannot overflow int8.
                    floating = dtype.startswith("float") or dtype == "bfloat16"
                    scales = ((0.5, 3.0) if floating else (0.5, 1.5)) if n == 7 else (1.0, 1.0)
                    name = f"ar.{dtype}.{op_name}.{n}"
                    x = rank_input(dtype, (n,), rank, op_name, (name, round_))
                    h = hvd.allreduce_async(x, name=name, op=op, prescale_factor=scales[0], postscale_factor=scales[1])
                    jobs.append((h, name, dtype, op_name, n, scales, round_))
        for h, name, dtype, op_name, n, scales, round_ in jobs:
            got = hvd.synchronize(h)
            inputs = [rank_input(dtype, (n,), r, op_name, (name, round_)) for r in range(size)]
            expected = reduce_reference(inputs, op_name, *scales)
            check_close(name, got, expected, dtype, "allreduce")
            assert got.dtype == np_dtype(dtype)
            if n in (13, 4099):
                same_bytes_everywhere(got, name)
    # A 2-D tensor keeps its shape.
    m = hvd.allreduce(np.full((3, 5), rank, dtype=np.float32), op=hvd.Sum, name="ar.2d")
    assert m.shape == (3, 5) and np.all(m == sum(range(size)))


def test_cache_turnover():
    rank, size = hvd.rank(), hvd.size()
    # Rounds where as many cached all-reduces as the cache holds are ready together with as many new
    # names: the round runs the cached ones by pointer into the cache, which keeps this round's entries
    # (with a small HVDLITE_CACHE_CAPACITY the new names are then not cached at all).
    count = int(os.environ.get("HVDLITE_CACHE_CAPACITY", "8")) or 8
    for step in range(6):
        names = [f"turnover.fixed.{k}" for k in range(count)] + [f"turnover.new.{step}.{k}" for k in range(count)]
        jobs = []
        for i, name in enumerate(names):
            x = rank_input("float32", (5 + i,), rank, "sum", (name, step))
            jobs.append((name, hvd.allreduce_async(x, name=name, op=hvd.Sum)))
        for i, (name, h) in enumerate(jobs):
            inputs = [rank_input("float32", (5 + i,), r, "sum", (name, step)) for r in range(size)]
            check_close(name, hvd.synchronize(h), reduce_reference(inputs, "sum"), "float32", f"turnover step {step}")


def test_grouped():
    rank, size = hvd.rank(), hvd.size()
    # The same name step after step reuses the group's prepared requests with new buffers and values; new
    # shapes under that name prepare a new group.
    for step, extra in ((0, 5), (1, 5), (2, 5), (3, 9)):
        tensors = [rank_input(d, (extra + i,), rank, "sum", ("g", d, step)) for i, d in enumerate(DTYPES)]
        outs = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="grouped")
        for i, (d, out) in enumerate(zip(DTYPES, outs)):
            inputs = [rank_input(d, (extra + i,), r, "sum", ("g", d, step)) for r in range(size)]
            check_close(f"grouped.{i}", out, reduce_reference(inputs, "sum"), d, f"grouped_allreduce step {step}")


def test_allgather():
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES + ["bool"]:
        for variant, rows_of in enumerate((lambda r: r + 1, lambda r: 0 if r == 1 else 2)):
            rows = rows_of(rank)
            x = (rank_input(dtype if dtype != "bool" else "uint8", (rows, 3), rank, "sum", ("ag", dtype, rows)))
            if dtype == "bool":
                x = x % 2 == 0
            got = hvd.allgather(x, name=f"ag.{dtype}.{variant}")
            parts = []
            for r in range(size):
                p = rank_input(dtype if dtype != "bool" else "uint8", (rows_of(r), 3), r, "sum", ("ag", dtype, rows_of(r)))
                parts.append(p % 2 == 0 if dtype == "bool" else p)
            expected = np.concatenate(parts)
            assert got.dtype == x.dtype and got.shape == expected.shape, (got.shape, expected.shape)
            assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), f"allgather {dtype}"


def test_broadcast():
    rank, size = hvd.rank(), hvd.size()
    for root in range(size):
        for dtype in DTYPES + ["bool"]:
            for n in (0, 1, 13, 4099):
                base = "uint8" if dtype == "bool" else dtype
                x = rank_input(base, (n,), rank, "sum", ("bc", dtype, n, root))
                if dtype == "bool":
                    x = x % 2 == 0
                got = hvd.broadcast(x, root_rank=root, name=f"bc.{root}.{dtype}.{n}")
                expected = rank_input(base, (n,), root, "sum", ("bc", dtype, n, root))
                if dtype == "bool":
                    expected = expected % 2 == 0
                assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), f"broadcast {dtype} root {root}"


def test_alltoall():
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES + ["bool"]:
        # rank r sends (r + d) % 3 rows of width 2 to rank d; row values identify sender and destination.
        splits = [(rank + d) % 3 for d in range(size)]
        rows = [np.full((s, 2), 10 * rank + d) for d, s in enumerate(splits)]
        x = np.concatenate(rows).astype(np_dtype(dtype) if dtype != "bool" else np.int64)
        if dtype == "bool":
            x = x % 2 == 0
        got, received = hvd.alltoall(x, splits=splits, name=f"a2a.{dtype}")
        expected_splits = [(r + rank) % 3 for r in range(size)]
        expected = np.concatenate([np.full(((r + rank) % 3, 2), 10 * r + rank) for r in range(size)])
        expected = expected % 2 == 0 if dtype == "bool" else expected.astype(np_dtype(dtype))
        assert list(received) == expected_splits, (received, expected_splits)
        assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8)), f"alltoall {dtype}"
    even = hvd.alltoall(np.arange(2 * size, dtype=np.float32) + 100 * rank, name="a2a.even")
    expected = np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 100 * r for r in range(size)])
    assert np.array_equal(even, expected), even


def test_reducescatter():
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        for op_name in ("sum", "average", "min", "max"):
            for dim0 in (1, size, 2 * size + 1):
                name = f"rs.{dtype}.{op_name}.{dim0}"
                x = rank_input(dtype, (dim0, 3), rank, op_name, name)
                got = hvd.reducescatter(x, op=OPS[op_name], name=name)
                full = reduce_reference([rank_input(dtype, (dim0, 3), r, op_name, name) for r in range(size)], op_name)
                start = sum(dim0 // size + (1 if r < dim0 % size else 0) for r in range(rank))
                rows = dim0 // size + (1 if rank < dim0 % size else 0)
                check_close(name, got, full[start:start + rows], dtype, "reducescatter")


def test_join():
    rank, size = hvd.rank(), hvd.size()
    # Rank 0 joins at once; the others run allreduces to which it contributes zeros.
    if rank == 0:
        last = hvd.join()
    else:
        for step in range(3):
            got = hvd.allreduce(np.full(4, float(rank)), op=hvd.Sum, name=f"join.step{step}")
            assert np.allclose(got, sum(range(1, size))), got
        last = hvd.join()
    assert 0 < last < size, last


def test_process_set():
    rank, size = hvd.rank(), hvd.size()
    members = list(range(1, size))
    ps = hvd.add_process_set(members)
    assert ps.included() == (rank in members)
    if ps.included():
        got = hvd.allreduce(np.full(3, float(rank)), op=hvd.Sum, name="ps.sum", process_set=ps)
        assert np.allclose(got, sum(members)), got
        got = hvd.allgather(np.array([rank]), name="ps.gather", process_set=ps)
        assert list(got) == members
        assert ps.rank() == members.index(rank)
    else:
        assert ps.rank() == -1
    assert hvd.remove_process_set(ps)
    hvd.barrier()


def test_topology():
    rank, size = hvd.rank(), hvd.size()
    where = expected_topology_here(rank, size)
    found = dict(host=socket.gethostname(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
                 cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size())
    assert found == where, f"rank {rank}: {found}, expected {where}"
    assert hvd.mpi_threads_supported()
