"""Worker (run under mpiexec -n 2 or 3): every hvdlite.tensorflow collective x dtype, eagerly and inside
tf.function, checked on every rank against a float64 NumPy reference computed from all ranks' inputs
(each rank can generate every rank's input, so the reference is independent of the library)."""
import numpy as np

import pytest
import ml_dtypes
import tensorflow as tf

import hvdlite.tensorflow as hvd
from harness.reference import reduce_reference
from hvdlite.testing.simulated_hosts import expected_topology_here

tf.get_logger().setLevel("ERROR")  # tracing a fresh tf.function per check is the point here
# 2 ranks only: the adapter hands any rank count to the same core, whose tests run 2, 3 and 4 ranks.
pytestmark = [pytest.mark.ranks(2), pytest.mark.hvd_env(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1, TF_CPP_MIN_LOG_LEVEL=2),
              pytest.mark.across_hosts]
RANK = SIZE = None  # set once hvdlite has started

checks = None  # the running test's Checks: the helpers below record into it


@pytest.fixture(autouse=True)
def record_into(request):
    global checks
    checks = request.getfixturevalue("checks")


@pytest.fixture(scope="module", autouse=True)
def started():
    global RANK, SIZE
    hvd.init()
    RANK, SIZE = hvd.rank(), hvd.size()


@pytest.fixture(scope="module")
def subset(started):
    process_set = hvd.add_process_set([0, SIZE - 1] if SIZE > 2 else [SIZE - 1])
    yield process_set
    hvd.remove_process_set(process_set)

NUMERIC = [tf.uint8, tf.uint16, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64]
ALL_DTYPES = NUMERIC + [tf.bool]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
MODES = ("eager", "function")
in_every_mode = pytest.mark.parametrize("mode", MODES)


def np_dtype(dtype):
    return ml_dtypes.bfloat16 if dtype == tf.bfloat16 else dtype.as_numpy_dtype


def tolerance(dtype):
    if dtype == tf.float16:
        return dict(rtol=2e-3, atol=2e-3)
    if dtype == tf.bfloat16:
        return dict(rtol=1.6e-2, atol=1.6e-2)
    if dtype == tf.float32:
        return dict(rtol=1e-5, atol=1e-5)
    if dtype == tf.float64:
        return dict(rtol=1e-12, atol=1e-12)
    return dict(rtol=0.0, atol=0.0)


def rank_values(rank, shape, dtype, seed, kind="any"):
    """Rank ``rank``'s input: small values whose sums and products over 3 ranks fit every dtype."""
    rng = np.random.RandomState(seed * 101 + rank)
    if dtype == tf.bool:
        values = rng.randint(0, 2, size=shape).astype(bool)
    elif kind == "product":
        if dtype.is_floating:
            values = rng.randint(2, 8, size=shape) / 4.0  # 0.5 .. 1.75, exact in every float type
        elif dtype.is_unsigned:
            values = rng.randint(1, 4, size=shape)
        else:
            values = rng.randint(-3, 4, size=shape)
    elif dtype.is_floating:
        values = rng.randint(-40, 40, size=shape) / 4.0  # exact in float16 and bfloat16
        if dtype in (tf.float32, tf.float64):
            values = values + rng.rand(*shape)
    elif dtype.is_unsigned:
        values = rng.randint(0, 40, size=shape)
    elif dtype == tf.int8:
        values = rng.randint(-40, 40, size=shape)
    else:
        values = rng.randint(-1000, 1000, size=shape)
    return np.asarray(values).astype(np_dtype(dtype))


def in_mode(mode, fn):
    """fn as called eagerly, or compiled by tf.function (traced afresh for this check)."""
    return fn if mode == "eager" else tf.function(fn)


def error_types(mode):
    return (hvd.HorovodInternalError, ValueError, TypeError) if mode == "eager" else (tf.errors.OpError,)


# --- allreduce -----------------------------------------------------------------------------------------------

@in_every_mode
def test_allreduce(mode):
    for d, dtype in enumerate(NUMERIC):
        for o, (op_name, op) in enumerate(OPS.items()):
            kind = "product" if op_name == "Product" else "any"
            shape = (3, 4) if dtype != tf.int64 else ()
            inputs = [rank_values(r, shape, dtype, seed=200 + 10 * d + o, kind=kind)
                      for r in range(SIZE)]
            fn = in_mode(mode, lambda x, op=op: hvd.allreduce(x, op=op))
            out = fn(tf.constant(inputs[RANK]))
            label = f"{mode} allreduce {op_name} {dtype.name}"
            checks.true(label + " dtype", out.dtype == dtype, f"{out.dtype}")
            checks.close(label, out.numpy(), reduce_reference(inputs, op_name), **tolerance(dtype))
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
        inputs = [rank_values(r, (5,), dtype, seed=7) for r in range(SIZE)]
        fn = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0))
        checks.close(f"{mode} allreduce scaled {dtype.name}", fn(tf.constant(inputs[RANK])).numpy(),
                     reduce_reference(inputs, "Sum", 0.5, 3.0), **tolerance(dtype))
    # The deprecated average argument and Horovod's default (Average).
    inputs = [rank_values(r, (4,), tf.float32, seed=9) for r in range(SIZE)]
    checks.close(f"{mode} allreduce average=False", in_mode(mode, lambda x: hvd.allreduce(x, average=False))(
        tf.constant(inputs[RANK])).numpy(), reduce_reference(inputs, "Sum"), rtol=1e-5, atol=1e-5)
    checks.close(f"{mode} allreduce default op", in_mode(mode, lambda x: hvd.allreduce(x))(
        tf.constant(inputs[RANK])).numpy(), reduce_reference(inputs, "Average"), rtol=1e-5, atol=1e-5)
    # Variables are read, and fp16 compression gives back float32.
    variable = tf.Variable(inputs[RANK])
    out = in_mode(mode, lambda: hvd.allreduce(variable, compression=hvd.Compression.fp16))()
    checks.true(f"{mode} allreduce fp16 compression dtype", out.dtype == tf.float32, f"{out.dtype}")
    checks.close(f"{mode} allreduce fp16 compression", out.numpy(), reduce_reference(inputs, "Average"),
                 rtol=2e-3, atol=2e-3)


@in_every_mode
def test_grouped_allreduce(mode):
    dtypes = [tf.float32, tf.int32, tf.float64, tf.float16, tf.int64]
    inputs = [[rank_values(r, (2, i + 1), d, seed=20 + i) for r in range(SIZE)] for i, d in enumerate(dtypes)]
    fn = in_mode(mode, lambda *xs: hvd.grouped_allreduce(list(xs), op=hvd.Sum))
    outs = fn(*[tf.constant(per_rank[RANK]) for per_rank in inputs])
    for i, dtype in enumerate(dtypes):
        checks.close(f"{mode} grouped_allreduce {i} {dtype.name}", outs[i].numpy(),
                     reduce_reference(inputs[i], "Sum"), **tolerance(dtype))


# --- allgather, broadcast, alltoall, reducescatter -----------------------------------------------------------

@in_every_mode
def test_allgather(mode):
    for dtype in ALL_DTYPES:
        inputs = [rank_values(r, (r + 1, 3), dtype, seed=30) for r in range(SIZE)]
        out = in_mode(mode, lambda x: hvd.allgather(x))(tf.constant(inputs[RANK]))
        checks.true(f"{mode} allgather {dtype.name} dtype", out.dtype == dtype)
        checks.close(f"{mode} allgather {dtype.name}", out.numpy(), np.concatenate(inputs))
    a = [rank_values(r, (2 * r + 1,), tf.float32, seed=31) for r in range(SIZE)]
    b = [rank_values(r, (1, 2, 2), tf.int32, seed=32) for r in range(SIZE)]
    outs = in_mode(mode, lambda x, y: hvd.grouped_allgather([x, y]))(tf.constant(a[RANK]), tf.constant(b[RANK]))
    checks.close(f"{mode} grouped_allgather 0", outs[0].numpy(), np.concatenate(a))
    checks.close(f"{mode} grouped_allgather 1", outs[1].numpy(), np.concatenate(b))


@in_every_mode
def test_broadcast(mode):
    for dtype in ALL_DTYPES:
        for root in sorted({0, SIZE - 1}):
            inputs = [rank_values(r, (2, 3), dtype, seed=40 + root) for r in range(SIZE)]
            out = in_mode(mode, lambda x, root=root: hvd.broadcast(x, root))(tf.constant(inputs[RANK]))
            checks.close(f"{mode} broadcast {dtype.name} root {root}", out.numpy(), inputs[root])


@in_every_mode
def test_alltoall(mode):
    def splits_of(r):
        return [(r + j) % 2 + 1 for j in range(SIZE)]
    for dtype in ALL_DTYPES:
        inputs = [rank_values(r, (sum(splits_of(r)), 2), dtype, seed=50) for r in range(SIZE)]
        expected, received = [], []
        for src in range(SIZE):
            offsets = np.cumsum([0] + splits_of(src))
            expected.append(inputs[src][offsets[RANK]:offsets[RANK + 1]])
            received.append(splits_of(src)[RANK])
        fn = in_mode(mode, lambda x, s: hvd.alltoall(x, splits=s))
        out, rsplits = fn(tf.constant(inputs[RANK]), tf.constant(splits_of(RANK), dtype=tf.int32))
        checks.close(f"{mode} alltoall {dtype.name}", out.numpy(), np.concatenate(expected))
        checks.close(f"{mode} alltoall {dtype.name} received_splits", rsplits.numpy(), received)
    inputs = [rank_values(r, (2 * SIZE, 3), tf.float32, seed=51) for r in range(SIZE)]
    # Without splits, Horovod returns the received tensor alone.
    out = in_mode(mode, lambda x: hvd.alltoall(x))(tf.constant(inputs[RANK]))
    checks.close(f"{mode} alltoall equal splits", out.numpy(),
                 np.concatenate([inputs[src][2 * RANK:2 * RANK + 2] for src in range(SIZE)]))


def reducescatter_slice(dim0, rank):
    base, extra = divmod(dim0, SIZE)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


@in_every_mode
def test_reducescatter(mode):
    dim0 = 2 * SIZE + 1  # uneven: the first rank gets one row more
    for dtype in (tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64):
        for op_name in ("Sum", "Average", "Min", "Max"):
            inputs = [rank_values(r, (dim0, 2), dtype, seed=60) for r in range(SIZE)]
            out = in_mode(mode, lambda x, op=OPS[op_name]: hvd.reducescatter(x, op=op))(tf.constant(inputs[RANK]))
            expected = reduce_reference(inputs, op_name)[reducescatter_slice(dim0, RANK)]
            checks.close(f"{mode} reducescatter {op_name} {dtype.name}", out.numpy(), expected, **tolerance(dtype))
    a = [rank_values(r, (SIZE * 2, 3), tf.float32, seed=61) for r in range(SIZE)]
    b = [rank_values(r, (SIZE + 2,), tf.float64, seed=62) for r in range(SIZE)]
    outs = in_mode(mode, lambda x, y: hvd.grouped_reducescatter([x, y], op=hvd.Sum))(
        tf.constant(a[RANK]), tf.constant(b[RANK]))
    checks.close(f"{mode} grouped_reducescatter 0", outs[0].numpy(),
                 reduce_reference(a, "Sum")[reducescatter_slice(SIZE * 2, RANK)], rtol=1e-5, atol=1e-5)
    checks.close(f"{mode} grouped_reducescatter 1", outs[1].numpy(),
                 reduce_reference(b, "Sum")[reducescatter_slice(SIZE + 2, RANK)], rtol=1e-12)


# --- gradients -----------------------------------------------------------------------------------------------

def weights(rank, shape, seed):
    return np.random.RandomState(900 + seed * 13 + rank).randn(*shape)


def gradient_of(mode, loss_fn, x):
    def compute(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = loss_fn(x)
        return tape.gradient(loss, x)
    return in_mode(mode, compute)(tf.constant(x)).numpy()


@in_every_mode
def test_gradients(mode):
    shape = (3, 2)
    inputs = [rank_values(r, shape, tf.float64, seed=70) for r in range(SIZE)]
    w = [weights(r, shape, 1) for r in range(SIZE)]
    mine = inputs[RANK]

    for op_name in ("Sum", "Average"):
        grad = gradient_of(mode, lambda x, op=OPS[op_name]: tf.reduce_sum(hvd.allreduce(x, op=op) * w[RANK]), mine)
        expected = np.sum(w, axis=0) / (SIZE if op_name == "Average" else 1)
        checks.close(f"{mode} grad allreduce {op_name}", grad, expected, rtol=1e-12, atol=1e-12)
    grad = gradient_of(mode, lambda x: tf.reduce_sum(
        hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25) * w[RANK]), mine)
    checks.close(f"{mode} grad allreduce scaled", grad, np.sum(w, axis=0) * 0.5, rtol=1e-12, atol=1e-12)
    for op_name in ("Min", "Max"):
        stack = np.stack(inputs)
        extreme = stack.min(0) if op_name == "Min" else stack.max(0)
        ties = (stack == extreme).sum(0)
        grad = gradient_of(mode, lambda x, op=OPS[op_name]: tf.reduce_sum(hvd.allreduce(x, op=op) * w[RANK]), mine)
        checks.close(f"{mode} grad allreduce {op_name}", grad, np.sum(w, 0) * (mine == extreme) / ties,
                     rtol=1e-12, atol=1e-12)
    others = np.prod([inputs[r] for r in range(SIZE) if r != RANK], axis=0)
    grad = gradient_of(mode, lambda x: tf.reduce_sum(hvd.allreduce(x, op=hvd.Product) * w[RANK]), mine)
    checks.close(f"{mode} grad allreduce Product", grad, np.sum(w, 0) * others, rtol=1e-10, atol=1e-10)

    grouped = gradient_of(mode, lambda x: tf.add_n([tf.reduce_sum(y * w[RANK]) for y in hvd.grouped_allreduce(
        [x, 2.0 * x], op=hvd.Sum)]), mine)
    checks.close(f"{mode} grad grouped_allreduce", grouped, 3.0 * np.sum(w, 0), rtol=1e-12, atol=1e-12)

    # allgather: d/dx_r of sum_j <W_j, concat_k x_k> is the sum over j of W_j's rows that hold x_r, averaged over
    # the ranks as Horovod does (TensorFlow and torch alike).
    gathered_inputs = [rank_values(r, (r + 1, 2), tf.float64, seed=71) for r in range(SIZE)]
    total_rows = sum(r + 1 for r in range(SIZE))
    wg = [weights(r, (total_rows, 2), 2) for r in range(SIZE)]
    start = sum(r + 1 for r in range(RANK))
    grad = gradient_of(mode, lambda x: tf.reduce_sum(hvd.allgather(x) * wg[RANK]), gathered_inputs[RANK])
    checks.close(f"{mode} grad allgather", grad, np.mean(wg, 0)[start:start + RANK + 1], rtol=1e-12, atol=1e-12)

    for root in sorted({0, SIZE - 1}):
        grad = gradient_of(mode, lambda x, root=root: tf.reduce_sum(hvd.broadcast(x, root) * w[RANK]), mine)
        expected = np.mean(w, 0) if RANK == root else np.zeros(shape)  # averaged, as Horovod's
        checks.close(f"{mode} grad broadcast root {root}", grad, expected, rtol=1e-12, atol=1e-12)

    # alltoall with equal splits: rank r's block j goes to rank j, where it is weighted by W_j's block r.
    a2a_in = rank_values(RANK, (2 * SIZE, 2), tf.float64, seed=72)
    wa = [weights(r, (2 * SIZE, 2), 3) for r in range(SIZE)]
    grad = gradient_of(mode, lambda x: tf.reduce_sum(hvd.alltoall(x) * wa[RANK]), a2a_in)
    expected = np.concatenate([wa[j][2 * RANK:2 * RANK + 2] for j in range(SIZE)])
    checks.close(f"{mode} grad alltoall", grad, expected, rtol=1e-12, atol=1e-12)

    # reducescatter: rank j keeps rows j of the reduction, weighted by W_j; Horovod's gradient is those weights
    # gathered, times the set size for a Sum (the gradient of the Sum averaged over ranks) and as they are for an
    # Average.
    dim0 = 2 * SIZE + 1
    rs_in = rank_values(RANK, (dim0, 2), tf.float64, seed=73)
    wr = [weights(r, (reducescatter_slice(dim0, r).stop - reducescatter_slice(dim0, r).start, 2), 4)
          for r in range(SIZE)]
    for op_name in ("Sum", "Average"):
        grad = gradient_of(mode, lambda x, op=OPS[op_name]: tf.reduce_sum(hvd.reducescatter(x, op=op) * wr[RANK]),
                           rs_in)
        expected = np.concatenate(wr) * (SIZE if op_name == "Sum" else 1)
        checks.close(f"{mode} grad reducescatter {op_name}", grad, expected, rtol=1e-12, atol=1e-12)


@in_every_mode
def test_indexed_slices(mode):
    dense_shape = (6, 3)
    values = [rank_values(r, (2, 3), tf.float32, seed=80) for r in range(SIZE)]
    indices = [np.array([r % 6, (2 * r + 1) % 6], dtype=np.int64) for r in range(SIZE)]

    def reduce_slices(v, i):
        out = hvd.allreduce(tf.IndexedSlices(v, i, dense_shape=tf.constant(dense_shape, tf.int64)))
        return out.values, out.indices
    out_values, out_indices = in_mode(mode, reduce_slices)(tf.constant(values[RANK]), tf.constant(indices[RANK]))
    dense = np.zeros(dense_shape)
    for v, i in zip(values, indices):
        np.add.at(dense, i, v.astype(np.float64))
    got = np.zeros(dense_shape)
    np.add.at(got, out_indices.numpy(), out_values.numpy().astype(np.float64))
    checks.close(f"{mode} allreduce IndexedSlices", got, dense / SIZE, rtol=1e-6, atol=1e-6)


# --- helpers and queries -------------------------------------------------------------------------------------

@in_every_mode
def test_broadcast_variables(mode):
    variables = [tf.Variable(rank_values(RANK, (3,), tf.float32, seed=90)),
                 tf.Variable(rank_values(RANK, (2, 2), tf.int64, seed=91))]
    expected = [rank_values(1 % SIZE, (3,), tf.float32, seed=90), rank_values(1 % SIZE, (2, 2), tf.int64, seed=91)]
    if mode == "eager":
        hvd.broadcast_variables(variables, root_rank=1 % SIZE)
    else:
        @tf.function
        def assign_from_root():
            hvd.broadcast_variables(variables, root_rank=1 % SIZE)
        assign_from_root()
    for i, (v, e) in enumerate(zip(variables, expected)):
        checks.close(f"{mode} broadcast_variables {i}", v.numpy(), e)


def test_objects():
    obj = {"rank": RANK, "payload": list(range(RANK + 2))}
    checks.true("broadcast_object", hvd.broadcast_object(obj, root_rank=SIZE - 1) ==
                {"rank": SIZE - 1, "payload": list(range(SIZE + 1))})
    gathered = hvd.allgather_object(obj)
    checks.true("allgather_object", gathered == [{"rank": r, "payload": list(range(r + 2))} for r in range(SIZE)],
                str(gathered))
    checks.true("broadcast_object_fn", hvd.broadcast_object_fn(root_rank=0)(RANK) == 0)


def test_queries():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    checks.true("size", hvd.size() == world.Get_size())
    checks.true("rank", hvd.rank() == world.Get_rank())
    where = expected_topology_here(hvd.rank(), hvd.size())  # one host, or the simulated hosts' layout
    for query in ("local_rank", "local_size", "cross_rank", "cross_size"):
        checks.true(query, getattr(hvd, query)() == where[query])
    checks.true("is_initialized", hvd.is_initialized())
    checks.true("mpi_built", hvd.mpi_built() and hvd.mpi_enabled())
    checks.true("size_op in function", int(tf.function(lambda: hvd.size_op())()) == SIZE)
    checks.true("rank_op in function", int(tf.function(lambda: hvd.rank_op())()) == RANK)


@in_every_mode
def test_join_and_barrier(mode):
    if mode == "eager":
        hvd.barrier()
        last = int(hvd.join())
    else:
        tf.function(lambda: hvd.barrier())()
        last = int(tf.function(lambda: hvd.join())())
    checks.true(f"{mode} join returns a rank", 0 <= last < SIZE, str(last))


@in_every_mode
def test_process_set(mode, subset):
    if RANK not in subset.ranks:
        return
    inputs = {r: rank_values(r, (4,), tf.float32, seed=100) for r in subset.ranks}
    out = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum, process_set=subset))(tf.constant(inputs[RANK]))
    checks.close(f"{mode} process set allreduce", out.numpy(), reduce_reference(list(inputs.values()), "Sum"), rtol=1e-5, atol=1e-5)
    out = in_mode(mode, lambda x: hvd.allgather(x, process_set=subset))(tf.constant(inputs[RANK]))
    checks.close(f"{mode} process set allgather", out.numpy(), np.concatenate([inputs[r] for r in subset.ranks]))
    root = subset.ranks[-1]  # a global rank, as in Horovod
    out = in_mode(mode, lambda x: hvd.broadcast(x, root, process_set=subset))(tf.constant(inputs[RANK]))
    checks.close(f"{mode} process set broadcast from global rank {root}", out.numpy(), inputs[root])


@in_every_mode
def test_unnamed_collectives_of_a_subset(mode, subset):
    """Only the subset's ranks run its unnamed collective; the unnamed global one after it must still get the
    same name on every rank (names are counted per process set)."""
    member = RANK in subset.ranks
    inputs = [rank_values(r, (2,), tf.float32, seed=130) for r in range(SIZE)]

    def body(x):
        partial = hvd.allreduce(x, op=hvd.Sum, process_set=subset) if member else x
        return partial, hvd.allreduce(x, op=hvd.Sum)
    partial, total = in_mode(mode, body)(tf.constant(inputs[RANK]))
    checks.close(f"{mode} unnamed global allreduce after a subset's", total.numpy(),
                 reduce_reference(inputs, "Sum"), rtol=1e-5, atol=1e-5)
    if member:
        checks.close(f"{mode} unnamed subset allreduce", partial.numpy(),
                     reduce_reference([inputs[r] for r in subset.ranks], "Sum"), rtol=1e-5, atol=1e-5)


# --- errors: every rank raises, and the core keeps working --------------------------------------------------

@in_every_mode
def test_errors(mode):
    errors = error_types(mode)
    name = f"mismatch_shape_{mode}"
    shape = (2 + RANK,)
    checks.raises(f"{mode} mismatched shapes raise", errors, lambda: in_mode(
        mode, lambda x: hvd.allreduce(x, name=name))(tf.zeros(shape)), match=(name,))
    name = f"mismatch_dtype_{mode}"
    dtype = tf.float32 if RANK == 0 else tf.float64
    checks.raises(f"{mode} mismatched dtypes raise", errors, lambda: in_mode(
        mode, lambda x: hvd.allreduce(x, name=name))(tf.zeros((3,), dtype)), match=(name,))
    name = f"mismatch_root_{mode}"
    checks.raises(f"{mode} mismatched broadcast roots raise", errors, lambda: in_mode(
        mode, lambda x: hvd.broadcast(x, RANK % 2, name=name))(tf.zeros((3,))), match=(name,))
    name = f"mismatch_op_{mode}"
    op = hvd.Sum if RANK == 0 else hvd.Max
    checks.raises(f"{mode} mismatched ops raise", errors, lambda: in_mode(
        mode, lambda x: hvd.allreduce(x, op=op, name=name))(tf.zeros((3,))), match=(name,))
    name = f"bool_allreduce_{mode}"
    checks.raises(f"{mode} bool allreduce raises", errors, lambda: in_mode(
        mode, lambda x: hvd.allreduce(x, name=name))(tf.zeros((3,), tf.bool)), match=("bool",))
    checks.raises(f"{mode} unsupported dtype raises", errors, lambda: in_mode(
        mode, lambda x: hvd.allreduce(x))(tf.zeros((3,), tf.uint32)), match=("uint32",))
    inputs = [rank_values(r, (3,), tf.float32, seed=110) for r in range(SIZE)]
    out = in_mode(mode, lambda x: hvd.allreduce(x, op=hvd.Sum))(tf.constant(inputs[RANK]))
    checks.close(f"{mode} allreduce works after errors", out.numpy(), reduce_reference(inputs, "Sum"),
                 rtol=1e-5, atol=1e-5)


def test_names_in_control_flow():
    """Unnamed collectives inside tf.cond / tf.while_loop get the same names on every rank even when one rank
    traced more before (TensorFlow numbers those graphs with a process-wide counter)."""
    if RANK == 0:
        for _ in range(3):  # advance TensorFlow's counter on rank 0 only
            tf.function(lambda x: tf.cond(x > 0, lambda: x + 1, lambda: x - 1))(tf.constant(1.0))

    @tf.function
    def reduce_in_control_flow(x):
        y = tf.cond(tf.reduce_sum(x) > -1e9, lambda: hvd.allreduce(x, op=hvd.Sum), lambda: x)
        _, z = tf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, hvd.allreduce(v, op=hvd.Sum)), [0, y])
        return z
    inputs = [rank_values(r, (3,), tf.float32, seed=120) for r in range(SIZE)]
    out = reduce_in_control_flow(tf.constant(inputs[RANK]))
    checks.close("unnamed collectives in tf.cond and tf.while_loop", out.numpy(),
                 reduce_reference(inputs, "Sum") * SIZE * SIZE, rtol=1e-5, atol=1e-4)
