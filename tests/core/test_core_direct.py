"""The direct all-reduce (cross-memory reads between ranks on one host) on every rank against a float64
reference, where its own code paths are: a fused batch of more tensors than one system call takes
(IOV_MAX), split across ranks in the middle of tensors, half of them in place; one tensor larger than a
read chunk, in place, staged (up to 4 MiB) or read in place (above; so are a few tensors averaging above it);
half-precision types and every op; results bitwise equal on all ranks; views of one array into views of
another, which the core streams as runs. A shared staging buffer grows after peers mapped it; a rank that cannot make one fails that batch
on every rank with its reason, and the next batch works.

Beside them, single-process tests launch whole jobs: auto's choice of direct seen in the timeline, and where
init's probe finds direct cannot work (forced: init fails on every rank with the reason; auto: the ring).
"""
import textwrap

import numpy as np
import pytest

import hvdlite as hvd
from hvdlite.errors import HvdliteError
from hvdlite.requests import Collective, PreparedGroup, Request
from harness.numpy_groups import OPS, reduce_group_and_check, same_bytes_everywhere
from harness.processes import assert_ran_ok, run_mpi
from harness.reference import check_close, rank_input, reduce_reference
from harness.timeline import timeline_phases

# A bug fails fast instead of hanging.
pytestmark = [pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20), pytest.mark.sanitize(address=True, thread=True)]
DIRECT = pytest.mark.hvd_env(HVDLITE_ALLREDUCE_ALGORITHM="direct")


@pytest.fixture(scope="module")
def started():
    hvd.init()



def run_group(label, dtype, op_name, sizes, in_place_every=2):
    """Submits len(sizes) all-reduces as one group (one fused batch); every in_place_every-th in place."""
    return reduce_group_and_check(label, dtype, op_name, sizes, "direct allreduce", in_place_every)


def views(block, sizes, gaps):
    """Views of block laid one after another, gaps[i] elements left out before view i (0: it follows the last)."""
    out, at = [], 0
    for n, gap in zip(sizes, gaps):
        at += gap
        out.append(block[at:at + n])
        at += n
    return out


def run_views(label, sizes, input_gaps, output_gaps, spread=False):
    """A group whose tensors are views of one array into views of another: where they follow each other on both
    sides the core streams them as one run, where a gap parts them (on either side) it does not, and a view that
    is its own output (in place) runs with its neighbours when they are in place too. With spread, ranks
    other than 0 pass separate arrays instead (runs differ between ranks; the bytes and the protocol must not)."""
    rank, size = hvd.rank(), hvd.size()
    expected_inputs = [rank_input("float32", (n,), rank, "sum", (label, i)) for i, n in enumerate(sizes)]
    if spread and rank != 0:
        inputs = [x.copy() for x in expected_inputs]
        outputs = [np.full_like(x, 99) for x in inputs]
    else:
        total = sum(sizes) + sum(input_gaps) + sum(output_gaps or [])
        inputs = views(np.zeros(total, np.float32), sizes, input_gaps)
        for view, values in zip(inputs, expected_inputs):
            view[:] = values
        in_place = output_gaps is None
        outputs = inputs if in_place else views(np.full(total, 99, np.float32), sizes, output_gaps)
    group = PreparedGroup([Request(Collective.ALLREDUCE, f"{label}.{i}", "float32", (n,), 0, 0, op=hvd.Sum)
                           for i, n in enumerate(sizes)])
    handle = group.submit(inputs, outputs, (inputs, outputs))
    handle.wait()
    handle.release()
    for i, (n, out) in enumerate(zip(sizes, outputs)):
        expected = reduce_reference([rank_input("float32", (n,), r, "sum", (label, i)) for r in range(size)], "sum")
        check_close(f"{label}.{i}", out, expected, "float32", "all-reduce of views")
    same_bytes_everywhere(outputs, label)


@pytest.mark.ranks(3)
@pytest.mark.parametrize("algorithm", [pytest.param(a, marks=pytest.mark.hvd_env(HVDLITE_ALLREDUCE_ALGORITHM=a))
                                       for a in ("direct", "ring")])
def test_views_of_one_buffer_reduce_as_runs(started, algorithm):
    sizes = [4096] * 64 + [1000, 3, 70_000]
    run_views("views.adjacent", sizes, [0] * len(sizes), [0] * len(sizes))
    # Parted every few tensors on one side only: runs end where either side jumps.
    run_views("views.gaps", sizes, [0, 0, 5] * 22 + [1], [7, 0, 0, 0] * 16 + [0, 0, 3])
    run_views("views.in.place", sizes, [0] * 60 + [9] * 7, None)
    # 5.2 MiB of adjacent views on rank 0 (one run, more than a tensor the direct all-reduce stages), separate
    # arrays elsewhere: every rank must still treat it as the fused batch it is.
    run_views("views.spread", [262_144] * 5 + [50_000], [0] * 6, [0] * 6, spread=True)
    # Views averaging above 4 MiB, read in place: one run on rank 0 is two tensors everywhere else.
    run_views("views.spread.large", [1_100_000, 1_000_003], [0, 0], [0, 0], spread=True)


@pytest.mark.ranks(2, 3, 4)
@DIRECT
def test_fused_batches_of_every_size_dtype_and_op(started):
    rng = np.random.default_rng(7)  # the same sizes on every rank
    # A small batch first: the peers map its staging buffer, which the next batches make grow.
    run_group("small", "float32", "sum", [100, 200, 300])
    # 3000 tensors of odd sizes: a share spans more of them than one read takes (IOV_MAX, 1024), and
    # shares cut tensors in two.
    run_group("many", "float32", "sum", list(rng.integers(1, 3000, size=3000)))
    # One tensor over several 256 KiB read chunks, in place, with a count no rank count divides: staged
    # up to 4 MiB, read in place through the kernel above.
    run_group("large", "float32", "sum", [300_007], in_place_every=1)
    run_group("large.out", "float64", "average", [100_003], in_place_every=2)
    run_group("larger", "float32", "sum", [1_100_003], in_place_every=1)
    run_group("larger.out", "float64", "average", [600_001], in_place_every=2)
    # Tensors averaging above 4 MiB are read in place too, tensor by tensor: a large one with a few bytes after
    # it (as a carried round's), and two whose boundary falls inside a share, one in place.
    run_group("larger.tail", "float32", "sum", [1_500_007, 3], in_place_every=None)
    run_group("larger.two", "float32", "sum", [1_200_001, 1_300_003], in_place_every=2)
    for dtype in ("float16", "bfloat16", "int32", "int64", "uint8"):
        for op_name in OPS:
            if op_name == "product":
                sizes = [5, 9, 13]
            else:
                sizes = list(rng.integers(1, 5000, size=40))
            run_group(f"mix.{dtype}.{op_name}", dtype, op_name, sizes)
    # The same names again: the response cache's fast path feeds the same batches.
    run_group("many", "float32", "sum", list(np.random.default_rng(7).integers(1, 3000, size=3000)))


@pytest.mark.ranks(2, 3, 4)
@DIRECT
def test_a_rank_that_cannot_grow_its_staging_buffer_fails_the_batch_everywhere(started):
    """The last rank cannot open a file (RLIMIT_NOFILE 0), so its staging buffer (a memfd) cannot grow: the
    batch fails on every rank, naming that rank and why, and nothing is left in flight."""
    import resource
    rank, size = hvd.rank(), hvd.size()
    # 24 MB of tensors of 4 MB (staged: they average up to 4 MiB), more than any batch before: the buffer must grow
    sizes = [1_000_000] * 6
    inputs = [np.full(n, rank + 1.0, dtype=np.float32) for n in sizes]
    group = PreparedGroup([Request(Collective.ALLREDUCE, f"no.shared.{i}", "float32", x.shape, 0, 0, op=hvd.Sum)
                           for i, x in enumerate(inputs)])
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if rank == size - 1:
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, limits[1]))
    try:
        handle = group.submit(inputs, inputs, inputs)
        try:
            handle.wait()
            raise AssertionError("a batch whose staging buffer failed must raise")
        except HvdliteError as error:
            message = str(error)
        handle.release()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    if rank == size - 1:
        assert "memfd_create" in message and "Too many open files" in message, message
    else:
        assert f"rank {size - 1}" in message and "see its error" in message, message
    # The next batch (the buffer now grows on every rank) reduces correctly.
    run_group("after.failure", "float32", "sum", sizes)


def test_auto_reduces_large_messages_directly_and_small_ones_through_mpi(tmp_path):
    trace = tmp_path / "trace.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, hvdlite as hvd
        hvd.init()
        big = hvd.allreduce(np.full(1 << 18, hvd.rank() + 1.0, dtype=np.float32), name="big", op=hvd.Sum)
        small = hvd.allreduce(np.full(100, hvd.rank() + 1.0, dtype=np.float32), name="small", op=hvd.Sum)
        assert np.all(big == 3) and np.all(small == 3), (big[:4], small[:4])
        hvd.shutdown()
        print("WORKER OK")
    """))
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_TIMELINE": str(trace)}), 2)
    phases = timeline_phases(trace)
    assert "DIRECT_ALLREDUCE" in phases["big"], phases["big"]
    assert "DIRECT_ALLREDUCE" not in phases["small"] and "RING_ALLREDUCE" not in phases["small"], phases["small"]


UNAVAILABLE_JOB = """
    import resource, sys
    import numpy as np
    import hvdlite as hvd
    from hvdlite.errors import HvdliteError
    forced = sys.argv[1] == "direct"
    hvd.init()  # once as usual, so that the second init below opens no new files of Python's
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    if rank == size - 1:  # this rank cannot make the shared staging buffer init's probe maps
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, limits[1]))
    try:
        hvd.init()
        error = None
    except HvdliteError as caught:
        error = str(caught)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    if forced:
        assert error is not None, "init with direct forced must fail where direct cannot work"
        assert f"rank {size - 1} cannot read its peers' memory" in error and "memfd_create" in error, error
        assert not hvd.is_initialized()
    else:
        assert error is None, error
        x = np.arange(1 << 18, dtype=np.float64) * (rank + 1)
        out = hvd.allreduce(x, name="big", op=hvd.Sum)
        assert np.array_equal(out, np.arange(1 << 18, dtype=np.float64) * (size * (size + 1) // 2)), out[:4]
        hvd.shutdown()
    print("WORKER OK")
"""


@pytest.mark.parametrize("algorithm", ["direct", "auto"])
def test_where_direct_cannot_work_init_says_why_or_auto_uses_the_ring(tmp_path, algorithm):
    trace = tmp_path / "trace.json"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(UNAVAILABLE_JOB))
    env = {"HVDLITE_ALLREDUCE_ALGORITHM": algorithm, "HVDLITE_TIMELINE": str(trace)}
    assert_ran_ok(run_mpi(3, str(script), algorithm, env=env), 3)
    if algorithm == "auto":
        phases = timeline_phases(trace)
        assert "RING_ALLREDUCE" in phases["big"] and "DIRECT_ALLREDUCE" not in phases["big"], phases["big"]
