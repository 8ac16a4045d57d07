"""Every tensor collective of hvdlite.torch, checked on every rank against a float64 numpy reference.

Each rank's input comes from a generator seeded by its rank, so every rank rebuilds every other rank's input
and computes the expected result itself, without trusting any collective.
"""
import time
import warnings

import numpy as np
import pytest
import torch
from mpi4py import MPI

import hvdlite.torch as hvd
from harness.reference import reduce_reference as reference_reduce
from harness.seeds import rank_generator
from hvdlite.testing.simulated_hosts import expected_topology_here

pytestmark = [pytest.mark.ranks(2, 3),
              # A rank that never submits turns into an error on every rank instead of a hang.
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30),
              pytest.mark.across_hosts]


@pytest.fixture(scope="module", autouse=True)
def started():
    torch.set_num_threads(1)
    hvd.init()

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}
TOL = {torch.float16: (5e-3, 1e-2), torch.bfloat16: (2e-2, 5e-2), torch.float32: (1e-5, 1e-5),
       torch.float64: (1e-12, 1e-12)}


def make_input(dtype, rank, shape, salt, small=False):
    """Rank ``rank``'s input: exactly representable in ``dtype``; ``small`` keeps products in range."""
    g = rank_generator(rank, salt)
    if dtype.is_floating_point:
        values = torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2
        if small:
            values = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
        return values.to(dtype)
    if dtype == torch.uint8:
        low, high = (1, 4) if small else (0, 40)
    else:
        low, high = (-2, 3) if small else (-40, 40)
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64).to(dtype)


def tolerance(dtype):
    return TOL.get(dtype, (0.0, 0.0))


def test_allreduce_of_every_dtype_and_op_matches_float64(checks):
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            small = op_name == "Product"
            inputs = [make_input(dtype, r, (3, 5), salt=1, small=small) for r in range(size)]
            want = reference_reduce(inputs, op_name)
            rtol, atol = tolerance(dtype)
            x = inputs[rank].clone()
            got = hvd.allreduce(x, name=f"ar.{dtype}.{op_name}", op=op)
            checks.true(f"allreduce {dtype} {op_name} dtype kept", got.dtype == dtype, str(got.dtype))
            checks.close(f"allreduce {dtype} {op_name}", got, want, rtol, atol)
            checks.true(f"allreduce {dtype} {op_name} input untouched", torch.equal(x, inputs[rank]))
            # in place, on a non-contiguous view of a bigger tensor
            base = torch.zeros((5, 6), dtype=dtype)
            view = base.t()[:, :3]  # (6, 3) view, not contiguous
            data = [make_input(dtype, r, (6, 3), salt=2, small=small) for r in range(size)]
            view.copy_(data[rank])
            hvd.allreduce_(view, name=f"ar_.{dtype}.{op_name}", op=op)
            checks.close(f"allreduce_ non-contiguous {dtype} {op_name}", view, reference_reduce(data, op_name), rtol, atol)
            checks.true(f"allreduce_ {dtype} {op_name} rest of base untouched", bool((base.t()[:, 3:] == 0).all()))
        # Integers scale as in Horovod: in float64, truncated back (factors that keep int8 in range).
        scales = (0.5, 3.0) if dtype.is_floating_point else (0.5, 1.5)
        for op_name in ("Sum", "Average"):
            inputs = [make_input(dtype, r, (9,), salt=3) for r in range(size)]
            got = hvd.allreduce(inputs[rank], name=f"scaled.{dtype}.{op_name}", op=OPS[op_name],
                                prescale_factor=scales[0], postscale_factor=scales[1])
            rtol, atol = tolerance(dtype)
            checks.true(f"scaled allreduce {dtype} {op_name} dtype kept", got.dtype == dtype, str(got.dtype))
            checks.close(f"scaled allreduce {dtype} {op_name}", got, reference_reduce(inputs, op_name, *scales), rtol, 4 * atol)


def test_allreduce_async_in_place_and_scaled_variants(checks):
    rank, size = hvd.rank(), hvd.size()
    inputs = [make_input(torch.float32, r, (7,), salt=4) for r in range(size)]
    want = reference_reduce(inputs, "Average")
    h = hvd.allreduce_async(inputs[rank], name="async.avg")
    checks.true("allreduce_async returns an int handle", isinstance(h, int), repr(h))
    out = hvd.synchronize(h)
    checks.close("allreduce_async + synchronize", out, want, 1e-6, 1e-6)
    t = inputs[rank].clone()
    h = hvd.allreduce_async_(t, name="async_.avg")
    while not hvd.poll(h):
        time.sleep(0.001)
    same = hvd.synchronize(h)
    checks.true("allreduce_async_ returns the same tensor", same is t)
    checks.close("allreduce_async_ in place", t, want, 1e-6, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        got = hvd.allreduce(inputs[rank], average=False, name="deprecated.average")
    checks.close("average=False means Sum", got, reference_reduce(inputs, "Sum"), 1e-6, 1e-6)
    checks.raises("op and average together", ValueError, hvd.allreduce, inputs[rank], average=True, op=hvd.Sum)
    checks.raises("Adasum of integers", ValueError, hvd.allreduce, inputs[rank].to(torch.int32), op=hvd.Adasum,
                  match=["Adasum", "floating-point"])
    checks.raises("complex dtype is refused", ValueError, hvd.allreduce, torch.zeros(2, dtype=torch.complex64))
    unnamed = [hvd.allreduce(inputs[rank], op=hvd.Sum) for _ in range(3)]
    for i, u in enumerate(unnamed):
        checks.close(f"unnamed allreduce {i}", u, reference_reduce(inputs, "Sum"), 1e-6, 1e-6)
    scalar = hvd.allreduce(torch.tensor(float(rank + 1), dtype=torch.float64), op=hvd.Sum, name="scalar")
    checks.true("0-dim allreduce keeps its shape", scalar.shape == torch.Size([]), str(scalar.shape))
    checks.close("0-dim allreduce", scalar, size * (size + 1) / 2)
    empty = hvd.allreduce(torch.zeros((0, 3)), name="empty")
    checks.true("empty allreduce", empty.shape == (0, 3), str(empty.shape))
    # compression
    for comp, tol in ((hvd.Compression.fp16, 5e-3), (hvd.Compression.bf16, 3e-2)):
        got = hvd.allreduce(inputs[rank], name=f"compressed.{comp.__name__}", compression=comp)
        checks.true(f"{comp.__name__} result is float32", got.dtype == torch.float32, str(got.dtype))
        checks.close(f"allreduce with {comp.__name__}", got, want, tol, tol)
    ints = [make_input(torch.int32, r, (3,), salt=5) for r in range(size)]
    got = hvd.allreduce(ints[rank], name="compressed.int", compression=hvd.Compression.fp16, op=hvd.Sum)
    checks.true("fp16 compression leaves integers alone", got.dtype == torch.int32)
    checks.close("fp16-compressed int allreduce", got, reference_reduce(ints, "Sum"))


def test_cpu_tensors_take_the_numpy_c_path_and_keep_results(checks):
    """Contiguous CPU tensors go through the NumPy API's C path (async_ops.py, handles.py): every dtype in place,
    a kept result left alone by the next call of its name, a tensor that requires grad, handles shared with the
    NumPy API."""
    import hvdlite as hvd_numpy
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        inputs = [make_input(dtype, r, (4, 3), salt=6) for r in range(size)]
        t = inputs[rank].clone()
        same = hvd.synchronize(hvd.allreduce_async_(t, name=f"host_.{dtype}", op=hvd.Sum))
        checks.true(f"contiguous allreduce_async_ {dtype} returns the tensor", same is t)
        checks.close(f"contiguous allreduce_async_ {dtype}", t, reference_reduce(inputs, "Sum"), *tolerance(dtype))
        got = hvd.synchronize(hvd.allreduce_async(inputs[rank], name=f"host.{dtype}", op=hvd.Max))
        checks.true(f"contiguous allreduce_async {dtype} gives a {dtype} tensor", torch.is_tensor(got) and got.dtype == dtype, repr(got))
        checks.close(f"contiguous allreduce_async {dtype}", got, reference_reduce(inputs, "Max"))
    inputs = [make_input(torch.float32, r, (64,), salt=7) for r in range(size)]
    want = reference_reduce(inputs, "Sum")
    first = hvd.allreduce(inputs[rank], name="host.kept", op=hvd.Sum)
    second = hvd.allreduce(inputs[rank] * 2, name="host.kept", op=hvd.Sum)
    checks.close("a kept result after the next call of its name", first, want, 1e-5, 1e-5)
    checks.close("the next call's result", second, 2 * want, 1e-5, 1e-5)
    checks.true("the two results do not share memory", first.data_ptr() != second.data_ptr())
    w = inputs[rank].clone().requires_grad_(True)
    checks.close("allreduce_async of a tensor that requires grad", hvd.synchronize(hvd.allreduce_async(w, name="host.grad", op=hvd.Sum)), want, 1e-5, 1e-5)
    from_numpy = hvd_numpy.allreduce_async(inputs[rank].numpy(), name="host.numpy_api", op=hvd_numpy.Sum)
    from_torch = hvd.allreduce_async(inputs[rank], name="host.torch_api", op=hvd.Sum)
    checks.true("torch and NumPy handles are distinct", from_numpy != from_torch, f"{from_numpy} {from_torch}")
    checks.close("torch handle beside a NumPy one", hvd.synchronize(from_torch), want, 1e-5, 1e-5)
    checks.close("NumPy handle beside a torch one", hvd_numpy.synchronize(from_numpy), want, 1e-5, 1e-5)
    checks.raises("synchronize of a handle already synchronized", ValueError, hvd.synchronize, from_torch)
    checks.raises("poll of an unknown handle", ValueError, hvd.poll, 10 ** 9)
    from hvdlite import _tensor_calls
    strided = torch.zeros(8)
    checks.raises("the C in-place all-reduce refuses a strided array", ValueError, _tensor_calls.allreduce_in_place_async, strided, strided.numpy()[::2], name="host.strided")


def test_tensor_offsets_parameters_and_temporaries_reduce_right(checks):
    """What the array view of a tensor (staging.host_array) must get right: its offset into its storage, a
    Parameter, a temporary the caller drops at once; and the tensors that are staged instead (strided, 0-d,
    empty); a tensor passed by keyword: each checked against a float64 reduction of every rank's input."""
    import gc
    rank, size = hvd.rank(), hvd.size()
    bases = [make_input(torch.float64, r, (6, 5), salt=11) for r in range(size)]
    mine = bases[rank].clone()
    rows = mine[2:4]  # contiguous, 10 elements past the start of its storage
    checks.true("the slice is contiguous with an offset", rows.is_contiguous() and rows.storage_offset() == 10)
    same = hvd.synchronize(hvd.allreduce_async_(rows, name="view.rows_", op=hvd.Sum))
    checks.true("in place into a slice returns the slice", same is rows)
    checks.close("in place into rows 2-3 of a tensor", mine[2:4], reference_reduce([b[2:4] for b in bases], "Sum"))
    checks.close("rows before the slice untouched", mine[:2], bases[rank][:2].numpy())
    checks.close("rows after the slice untouched", mine[4:], bases[rank][4:].numpy())
    tail = bases[rank].view(-1)[7:19]
    checks.close("allreduce_async of a 1-D slice at offset 7", hvd.synchronize(hvd.allreduce_async(tail, name="view.tail", op=hvd.Max)), reference_reduce([b.view(-1)[7:19] for b in bases], "Max"))
    weight = torch.nn.Parameter(bases[rank].clone())
    checks.true("a Parameter in place returns it", hvd.synchronize(hvd.allreduce_async_(
        weight, name="view.parameter", op=hvd.Sum)) is weight)
    checks.close("allreduce_async_ of a Parameter", weight.detach(), reference_reduce(bases, "Sum"))
    handle = hvd.allreduce_async(bases[rank] * 3, name="view.temporary", op=hvd.Sum)
    gc.collect()
    [torch.full((6, 5), -1.0, dtype=torch.float64) for _ in range(8)]  # memory freed too early would be reused
    checks.close("allreduce_async of a dropped temporary", hvd.synchronize(handle), reference_reduce([b * 3 for b in bases], "Sum"), 1e-12, 1e-12)
    strided = bases[rank].clone()[:, ::2]
    checks.true("a strided tensor", not strided.is_contiguous())
    want = reference_reduce([b[:, ::2] for b in bases], "Sum")
    checks.close("allreduce_async of a strided tensor (Python path)", hvd.synchronize(hvd.allreduce_async(strided, name="view.strided", op=hvd.Sum)), want)
    checks.true("in place into a strided tensor returns it", hvd.synchronize(hvd.allreduce_async_(strided, name="view.strided_", op=hvd.Sum)) is strided)
    checks.close("allreduce_async_ of a strided tensor (Python path)", strided, want)
    scalars = [torch.tensor(float(r + 1.5), dtype=torch.float64) for r in range(size)]
    got = hvd.synchronize(hvd.allreduce_async(scalars[rank], name="view.scalar", op=hvd.Sum))
    checks.true("a 0-d result stays 0-d", got.dim() == 0, str(got.shape))
    checks.close("allreduce_async of a 0-d tensor (Python path)", got, reference_reduce(scalars, "Sum"))
    empty = torch.zeros(0, 3)
    checks.true("an empty tensor", tuple(hvd.synchronize(hvd.allreduce_async(empty, name="view.empty"))
                                     .shape) == (0, 3))
    checks.close("tensor passed by keyword", hvd.synchronize(hvd.allreduce_async(tensor=bases[rank], name="view.keyword", op=hvd.Sum)), reference_reduce(bases, "Sum"))
    checks.true("allreduce_async is named as Horovod's", hvd.allreduce_async.__name__ == "allreduce_async")


def test_grouped_allreduce_of_mixed_dtypes(checks):
    rank, size = hvd.rank(), hvd.size()
    dtypes = [torch.float32, torch.float64, torch.int32, torch.float16]
    groups = [[make_input(d, r, (i + 2, 3), salt=6 + i) for i, d in enumerate(dtypes)] for r in range(size)]
    wants = [reference_reduce([groups[r][i] for r in range(size)], "Sum") for i in range(len(dtypes))]
    outs = hvd.grouped_allreduce(groups[rank], name="grouped", op=hvd.Sum)
    for i, (o, w) in enumerate(zip(outs, wants)):
        checks.close(f"grouped_allreduce {dtypes[i]}", o, w, *tolerance(dtypes[i]))
    h = hvd.grouped_allreduce_async(groups[rank], name="grouped.async", op=hvd.Sum)
    outs = hvd.synchronize(h)
    checks.true("grouped_allreduce_async gives a list", isinstance(outs, list) and len(outs) == len(dtypes))
    for i, (o, w) in enumerate(zip(outs, wants)):
        checks.close(f"grouped_allreduce_async {dtypes[i]}", o, w, *tolerance(dtypes[i]))
    mine = [t.clone() for t in groups[rank]]
    hvd.grouped_allreduce_(mine, name="grouped_", op=hvd.Sum)
    for i, (o, w) in enumerate(zip(mine, wants)):
        checks.close(f"grouped_allreduce_ {dtypes[i]}", o, w, *tolerance(dtypes[i]))
    mine = [t.clone() for t in groups[rank]]
    hvd.synchronize(hvd.grouped_allreduce_async_(mine, name="grouped_async_", op=hvd.Sum))
    for i, (o, w) in enumerate(zip(mine, wants)):
        checks.close(f"grouped_allreduce_async_ {dtypes[i]}", o, w, *tolerance(dtypes[i]))


def test_allgather_with_rows_that_differ_by_rank(checks):
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES + [torch.bool]:
        if dtype == torch.bool:
            inputs = [make_input(torch.uint8, r, (r + 1, 2, 3), salt=7) > 20 for r in range(size)]
        else:
            inputs = [make_input(dtype, r, (r + 1, 2, 3), salt=7) for r in range(size)]
        want = np.concatenate([x.to(torch.float64).numpy() for x in inputs])
        got = hvd.allgather(inputs[rank], name=f"ag.{dtype}")
        checks.true(f"allgather {dtype} dtype", got.dtype == dtype, str(got.dtype))
        checks.close(f"allgather {dtype}", got, want)
        nc = inputs[rank].transpose(1, 2).contiguous().transpose(1, 2)  # same values, not contiguous
        checks.true("transposed input is not contiguous", not nc.is_contiguous() or nc.numel() <= 6)
        checks.close(f"allgather_async non-contiguous {dtype}", hvd.synchronize(hvd.allgather_async(nc, name=f"ag.nc.{dtype}")), want)
    a = [make_input(torch.float32, r, (r + 2,), salt=8) for r in range(size)]
    b = [make_input(torch.int64, r, (1, 4), salt=9) for r in range(size)]
    outs = hvd.grouped_allgather([a[rank], b[rank]], name="grouped_ag")
    checks.close("grouped_allgather float", outs[0], np.concatenate([x.numpy() for x in a]), 1e-7)
    checks.close("grouped_allgather int", outs[1], np.concatenate([x.numpy() for x in b]))
    outs = hvd.synchronize(hvd.grouped_allgather_async([a[rank], b[rank]], name="grouped_ag_async"))
    checks.close("grouped_allgather_async float", outs[0], np.concatenate([x.numpy() for x in a]), 1e-7)
    zero_rows = hvd.allgather(torch.ones((rank % 2, 3)), name="ag.zero.rows")
    checks.true("allgather with zero-row ranks", zero_rows.shape == (sum(r % 2 for r in range(size)), 3), str(zero_rows.shape))


def test_broadcast_from_the_last_rank(checks):
    rank, size = hvd.rank(), hvd.size()
    root = size - 1
    for dtype in DTYPES + [torch.bool]:
        inputs = [make_input(dtype if dtype != torch.bool else torch.uint8, r, (4, 3), salt=10)
                  for r in range(size)]
        if dtype == torch.bool:
            inputs = [x > 20 for x in inputs]
        want = inputs[root].to(torch.float64).numpy()
        original = inputs[rank].clone()
        got = hvd.broadcast(inputs[rank], root, name=f"bc.{dtype}")
        checks.close(f"broadcast {dtype}", got, want)
        checks.true(f"broadcast {dtype} leaves its input alone", torch.equal(inputs[rank], original))
        t = inputs[rank].clone().t()  # non-contiguous, in place
        hvd.broadcast_(t, root, name=f"bc_.{dtype}")
        checks.close(f"broadcast_ non-contiguous {dtype}", t, want.T)
        t = inputs[rank].clone()
        hvd.synchronize(hvd.broadcast_async_(t, 0, name=f"bc_async_.{dtype}"))
        checks.close(f"broadcast_async_ root 0 {dtype}", t, inputs[0].to(torch.float64).numpy())
        got = hvd.synchronize(hvd.broadcast_async(inputs[rank], 0, name=f"bc_async.{dtype}"))
        checks.close(f"broadcast_async root 0 {dtype}", got, inputs[0].to(torch.float64).numpy())


def test_alltoall_with_uneven_splits(checks):
    rank, size = hvd.rank(), hvd.size()

    def splits_of(r):
        return [(r + d) % 3 for d in range(size)]

    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8, torch.float64):
        inputs = [make_input(dtype, r, (sum(splits_of(r)), 2), salt=11) for r in range(size)]
        # rank ``rank`` receives from every r the block of r's rows destined to it
        blocks, received = [], []
        for r in range(size):
            start = sum(splits_of(r)[:rank])
            blocks.append(inputs[r][start:start + splits_of(r)[rank]].to(torch.float64).numpy())
            received.append(splits_of(r)[rank])
        out, got_splits = hvd.alltoall(inputs[rank], splits=splits_of(rank), name=f"a2a.{dtype}")
        checks.close(f"alltoall with splits {dtype}", out, np.concatenate(blocks))
        checks.true(f"alltoall received splits {dtype}", got_splits.tolist() == received, f"{got_splits.tolist()} != {received}")
        checks.true("received splits are int32", got_splits.dtype == torch.int32)
    equal = [make_input(torch.float32, r, (2 * size, 3), salt=12) for r in range(size)]
    want = np.concatenate([equal[r][2 * rank:2 * rank + 2].numpy() for r in range(size)])
    out = hvd.alltoall(equal[rank], name="a2a.equal")
    checks.true("alltoall without splits returns a tensor", torch.is_tensor(out))
    checks.close("alltoall equal splits", out, want)
    out, rs = hvd.synchronize(hvd.alltoall_async(equal[rank], splits=torch.tensor([2] * size),
                                                 name="a2a.async"))
    checks.close("alltoall_async with tensor splits", out, want)
    nc = equal[rank].t().contiguous().t()
    checks.close("alltoall non-contiguous", hvd.alltoall(nc, name="a2a.nc"), want)


def test_reducescatter_of_rows_not_divisible_by_size(checks):
    rank, size = hvd.rank(), hvd.size()
    dim0 = 2 * size + 1  # not divisible: the first dim0 % size ranks get one more row
    rows = [dim0 // size + (1 if r < dim0 % size else 0) for r in range(size)]
    start = sum(rows[:rank])
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        for op_name in ("Sum", "Average", "Max"):
            inputs = [make_input(dtype, r, (dim0, 3), salt=13) for r in range(size)]
            want = reference_reduce(inputs, op_name)[start:start + rows[rank]]
            got = hvd.reducescatter(inputs[rank], name=f"rs.{dtype}.{op_name}", op=OPS[op_name])
            checks.close(f"reducescatter {dtype} {op_name}", got, want, *tolerance(dtype))
    inputs = [make_input(torch.float32, r, (dim0, 2), salt=14) for r in range(size)]
    want = reference_reduce(inputs, "Average")[start:start + rows[rank]]
    checks.close("reducescatter default op is Average", hvd.reducescatter(inputs[rank], name="rs.default"), want, 1e-6, 1e-6)
    checks.close("reducescatter_async non-contiguous", hvd.synchronize(hvd.reducescatter_async(inputs[rank].t().contiguous().t(), name="rs.async")), want, 1e-6, 1e-6)
    scaled = hvd.reducescatter(inputs[rank], name="rs.scaled", op=hvd.Sum, prescale_factor=2.0,
                               postscale_factor=0.25)
    checks.close("reducescatter scaled", scaled, reference_reduce(inputs, "Sum", 2.0, 0.25)[start:start + rows[rank]], 1e-6, 1e-6)
    other = [make_input(torch.float64, r, (size, 4), salt=15) for r in range(size)]
    outs = hvd.grouped_reducescatter([inputs[rank], other[rank]], name="rs.grouped", op=hvd.Sum)
    checks.close("grouped_reducescatter 0", outs[0], reference_reduce(inputs, "Sum")[start:start + rows[rank]], 1e-6, 1e-6)
    checks.close("grouped_reducescatter 1", outs[1], reference_reduce(other, "Sum")[rank:rank + 1], 1e-12)
    outs = hvd.synchronize(hvd.grouped_reducescatter_async([other[rank]], name="rs.grouped.async", op=hvd.Sum))
    checks.close("grouped_reducescatter_async", outs[0], reference_reduce(other, "Sum")[rank:rank + 1], 1e-12)


def test_mismatches_and_duplicate_names_raise_on_every_rank(checks):
    rank, size = hvd.rank(), hvd.size()
    e = checks.raises("mismatched shapes raise RuntimeError", RuntimeError, hvd.allreduce, torch.ones(rank + 2), name="bad.shape")
    checks.true("the shape error names the tensor", e is not None and "bad.shape" in str(e), str(e))
    checks.true("the error is HorovodInternalError", isinstance(e, hvd.HorovodInternalError), type(e).__name__)
    checks.raises("mismatched dtypes raise RuntimeError", RuntimeError, hvd.allreduce, torch.ones(3, dtype=torch.float32 if rank % 2 == 0 else torch.float64), name="bad.dtype")
    checks.raises("mismatched broadcast shapes raise RuntimeError", RuntimeError, hvd.broadcast, torch.ones((2, rank + 1)), 0, name="bad.bcast")
    checks.raises("mismatched allgather trailing dims raise RuntimeError", RuntimeError, hvd.allgather, torch.ones((1, rank + 1)), name="bad.gather")
    # A duplicate name in flight: order the ranks with MPI barriers so the first request cannot complete.
    comm = MPI.COMM_WORLD
    x = torch.ones(2)
    handles = {}
    if rank != 0:
        handles["a"] = hvd.allreduce_async(x, name="dup.a")
        checks.raises("duplicate name in flight raises ValueError", ValueError, hvd.allreduce_async, x, name="dup.a")
    comm.Barrier()
    if rank == 0:
        handles["b"] = hvd.allreduce_async(x, name="dup.b")
        checks.raises("duplicate name in flight raises ValueError", ValueError, hvd.allreduce_async, x, name="dup.b")
        handles["a"] = hvd.allreduce_async(x, name="dup.a")
    comm.Barrier()
    if rank != 0:
        handles["b"] = hvd.allreduce_async(x, name="dup.b")
    for key in ("a", "b"):
        checks.close(f"the first of the duplicates completes ({key})", hvd.synchronize(handles[key]), np.ones(2))
    checks.raises("synchronize of an unknown handle", ValueError, hvd.synchronize, 10 ** 9)
    # the job goes on normally after errors
    got = hvd.allreduce(torch.full((3,), float(rank)), name="after.errors", op=hvd.Sum)
    checks.close("allreduce after errors", got, np.full(3, size * (size - 1) / 2))


def test_process_sets_join_and_objects(checks):
    rank, size = hvd.rank(), hvd.size()
    members = list(range(1, size)) if size > 1 else [0]
    ps = hvd.add_process_set(members)
    if rank in members:
        got = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, name="ps.sum", process_set=ps)
        checks.close("allreduce in a process set", got, [sum(members)])
        got = hvd.allgather(torch.tensor([rank]), name="ps.gather", process_set=ps)
        checks.close("allgather in a process set", got, members)
        root = members[-1]  # roots are global ranks, as in Horovod
        got = hvd.broadcast(torch.tensor([rank]), root, name="ps.bcast", process_set=ps)
        checks.close("broadcast from a global root rank", got, [root])
        obj = hvd.broadcast_object({"from": rank} if rank == root else None, root, process_set=ps)
        checks.true("broadcast_object in a process set", obj == {"from": root}, str(obj))
        if size > 1:
            checks.raises("a root outside the set", ValueError, hvd.broadcast, torch.tensor([rank]), 0,
                          process_set=ps, match=["root_rank 0", "not a member"])
    hvd.remove_process_set(ps)
    obj = hvd.broadcast_object({"rank": rank, "list": [1, 2.5, "x"]} if rank == 0 else None, root_rank=0)
    checks.true("broadcast_object", obj == {"rank": 0, "list": [1, 2.5, "x"]}, str(obj))
    objs = hvd.allgather_object(("r", rank, "x" * rank))
    checks.true("allgather_object", objs == [("r", r, "x" * r) for r in range(size)], str(objs))
    hvd.barrier()
    checks.true("barrier returns", True)
    # join: rank r contributes to r all-reduces then joins; joined ranks count as zeros
    for k in range(rank):
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=f"join.{k}")
        checks.close(f"allreduce {k} with joined ranks", got, np.full(2, sum(1 for r in range(size) if r > k)))
    last = hvd.join()
    checks.true("join returns the last rank to join", last == size - 1, repr(last))
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.join")
    checks.close("allreduce after join", got, np.full(2, size))


def test_topology_queries_and_build_flags(checks):
    checks.true("size matches MPI", hvd.size() == MPI.COMM_WORLD.Get_size())
    checks.true("rank matches MPI", hvd.rank() == MPI.COMM_WORLD.Get_rank())
    where = expected_topology_here(hvd.rank(), hvd.size())  # one host, or the simulated hosts' layout
    for query in ("local_rank", "local_size", "cross_rank", "cross_size"):
        checks.true(query, getattr(hvd, query)() == where[query])
    checks.true("is_homogeneous", hvd.is_homogeneous() is True)
    checks.true("is_initialized", hvd.is_initialized() is True)
    checks.true("mpi built and enabled", hvd.mpi_built() and hvd.mpi_enabled())
    checks.true("no gloo/nccl/cuda/rocm", not (hvd.gloo_built() or hvd.gloo_enabled() or hvd.nccl_built()
                                           or hvd.cuda_built() or hvd.rocm_built()))
    checks.true("global_process_set covers the job", hvd.global_process_set.size() == hvd.size())


def test_no_operation_is_left_in_flight():
    from hvdlite.torch import handles
    assert handles.in_flight() == 0
