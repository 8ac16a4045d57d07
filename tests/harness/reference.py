"""Independent float64 references and deterministic per-rank inputs for the tests."""
import zlib

import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is an install requirement
    BFLOAT16 = None

DTYPES = ["uint8", "uint16", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
TOLERANCE = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}


def np_dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def rank_input(name, shape, rank, op, seed):
    """What `rank` contributes: values small enough that no integer sum or product over the job's ranks
    overflows, nor a float16 product leaves its range (outside a job: as for 4 ranks)."""
    from harness.multirank import job_size
    ranks = job_size() or 4
    rng = np.random.default_rng(zlib.crc32(repr((seed, rank)).encode()))  # same on every process
    integer = not (name.startswith("float") or name == "bfloat16")
    if op == "product":
        if integer:
            # Factors of 2 from the first ranks only, as many as the type's largest value holds.
            doublings = int(np.log2(float(np.iinfo(np_dtype(name)).max)))
            values = rng.integers(1, 3 if rank < doublings else 2, size=shape).astype(np.float64)
        else:
            spread = 0.5 if ranks <= 8 else 0.1
            values = rng.uniform(1 - spread, 1 + spread, size=shape)
    elif integer:
        largest = np.iinfo(np_dtype(name)).max // ranks
        if name.startswith("uint"):
            values = rng.integers(0, min(50, largest + 1), size=shape)
        else:
            values = rng.integers(-min(30, largest), min(30, largest), size=shape)
    else:
        values = rng.uniform(-4, 4, size=shape)
    return np.asarray(values).astype(np_dtype(name))


def is_integer(value):
    """Whether a numpy array, torch tensor or TF tensor holds an integer type (its averages truncate)."""
    dtype = getattr(value, "dtype", None)
    if hasattr(dtype, "is_floating_point"):  # torch
        return not dtype.is_floating_point
    if hasattr(dtype, "is_floating"):  # TensorFlow
        return not dtype.is_floating
    return bool(np.issubdtype(np.asarray(value).dtype, np.integer))


def reduce_reference(inputs, op, prescale=1.0, postscale=1.0):
    """float64 reduction of the ranks' inputs (numpy arrays, torch or TF tensors) with hvdlite's semantics; op by
    name in any case ("sum", "Average", ...). Integer tensors scale as Horovod scales them: in float64, truncated
    toward zero after the prescale and once at the end (average and postscale together)."""
    from harness.checks import as_float64
    op = op.lower()
    integer = is_integer(inputs[0])
    stacked = np.stack([as_float64(x) * prescale for x in inputs])
    if integer:
        stacked = np.trunc(stacked)
    if op in ("sum", "average"):
        out = stacked.sum(axis=0)
        if op == "average":
            out = out / len(inputs)
    elif op == "min":
        out = stacked.min(axis=0)
    elif op == "max":
        out = stacked.max(axis=0)
    else:
        out = stacked.prod(axis=0)
    out = out * postscale
    return np.trunc(out) if integer else out


def check_close(name, got, expected, dtype_name, what):
    got64 = got.astype(np.float64)
    if dtype_name in TOLERANCE:
        tol = TOLERANCE[dtype_name]
        ok = np.allclose(got64, expected, rtol=tol, atol=tol * max(1.0, float(np.abs(expected).max(initial=0))))
    else:
        ok = np.array_equal(got64, expected)
    if not ok:
        raise AssertionError(f"{what} {name} ({dtype_name}): got {got64.ravel()[:8]} expected {expected.ravel()[:8]}")


def adasum_inputs(size, seed, shape, dtype=np.float64):
    """Every rank's input for an Adasum test: random directions, odd ranks' correlated with a common one, so that
    the coefficients differ from 1."""
    base = np.random.RandomState(seed).randn(*shape)
    return [(np.random.RandomState(seed + 1 + r).randn(*shape) + (r % 2) * base).astype(dtype) for r in range(size)]


def adasum_reference(per_rank):
    """Adasum of the ranks' inputs in float64, combined pairwise as the recursive halving does it: rank pairs
    (0, 1), (2, 3), ... first, then pairs of pairs. ``per_rank[r]`` is rank r's array (or list of arrays, each
    combined with its own coefficients)."""
    def combine(a, b):
        dot, aa, bb = float(np.vdot(a, b)), float(np.vdot(a, a)), float(np.vdot(b, b))
        a_coefficient = 1.0 - dot / aa * 0.5 if aa >= 1e-8 else 1.0
        b_coefficient = 1.0 - dot / bb * 0.5 if bb >= 1e-8 else 1.0
        return a_coefficient * a + b_coefficient * b
    from harness.checks import as_float64
    single = not isinstance(per_rank[0], (list, tuple))
    level = [[as_float64(x) for x in ([tensors] if single else tensors)] for tensors in per_rank]
    while len(level) > 1:
        level = [[combine(a, b) for a, b in zip(level[i], level[i + 1])] for i in range(0, len(level), 2)]
    return level[0][0] if single else level[0]
