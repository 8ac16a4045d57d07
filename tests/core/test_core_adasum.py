"""Adasum in the core, through the NumPy API on 2 and 4 ranks, checked on every rank against a float64 reference of
the same formula combined in the same pairs (harness.reference.adasum_reference): single tensors and fused batches
of every floating dtype, grouped calls, a zero input, scale factors and a process set. (PyTorch, TensorFlow and
training with Adasum: test_adasum.py.)
"""
import numpy as np
import pytest

import hvdlite as hvd
from harness.checks import as_float64
from harness.reference import BFLOAT16, adasum_inputs, adasum_reference

pytestmark = [pytest.mark.ranks(2, 4), pytest.mark.across_hosts, pytest.mark.sanitize(address=True, thread=True)]
TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 2e-5, np.dtype(np.float16): 2e-2, BFLOAT16: 5e-2}


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


def test_single_tensors_of_every_floating_dtype_and_size(checks):
    rank = hvd.rank()
    for dtype, tolerance in TOLERANCE.items():
        for shape in [(1,), (7,), (3, 5), (1000,), (4099,)]:
            xs = adasum_inputs(hvd.size(), len(shape) * 100 + shape[0], shape, dtype)
            got = hvd.allreduce(xs[rank], op=hvd.Adasum, name=f"adasum.{dtype}.{shape}")
            checks.true(f"{dtype} {shape} dtype kept", got.dtype == dtype, str(got.dtype))
            checks.close(f"adasum {dtype} {shape}", as_float64(got), adasum_reference(xs), tolerance, tolerance)
            same = hvd.allgather(got.reshape(1, -1).view(np.uint8))
            checks.true(f"adasum {dtype} {shape} bitwise equal on every rank", (same == same[0]).all())


def test_fused_batches_have_coefficients_per_tensor(checks):
    rank = hvd.rank()
    shapes = [(5,), (300,), (1,), (17, 3), (64,)]
    xs = [adasum_inputs(hvd.size(), 500 + i, shape, np.float32) for i, shape in enumerate(shapes)]
    per_rank = [[x[r] for x in xs] for r in range(hvd.size())]
    handles = [hvd.allreduce_async(x[rank], op=hvd.Adasum, name=f"fused.{i}") for i, x in enumerate(xs)]
    expected = adasum_reference(per_rank)
    for i, h in enumerate(handles):
        checks.close(f"fused tensor {i}", hvd.synchronize(h), expected[i], 2e-5, 2e-5)
    grouped = hvd.grouped_allreduce([x[rank] for x in xs], op=hvd.Adasum, name="grouped")
    for i, got in enumerate(grouped):
        checks.close(f"grouped tensor {i}", got, expected[i], 2e-5, 2e-5)
    # A zero vector leaves the other unchanged (its coefficient stays 1).
    zeros = [np.zeros(6) if r == 0 else np.arange(6.0) + r for r in range(hvd.size())]
    checks.close("a zero input", hvd.allreduce(zeros[rank], op=hvd.Adasum), adasum_reference(zeros), 1e-12, 1e-12)


def test_scale_factors_and_a_process_set(checks):
    rank, size = hvd.rank(), hvd.size()
    xs = adasum_inputs(hvd.size(), 900, (33,))
    got = hvd.allreduce(xs[rank], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0)
    checks.close("prescale and postscale", got, 3.0 * adasum_reference([0.5 * x for x in xs]), 1e-12, 1e-12)
    members = list(range(size // 2, size))
    ps = hvd.add_process_set(members)
    try:
        if rank in members:
            got = hvd.allreduce(xs[rank], op=hvd.Adasum, process_set=ps)
            checks.close("in a process set", got, adasum_reference([xs[r] for r in members]), 1e-12, 1e-12)
    finally:
        hvd.remove_process_set(ps)
