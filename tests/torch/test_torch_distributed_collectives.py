"""Every collective of the "hvdlite" torch.distributed backend, on real ranks, checked on every rank against a float64
reference built from every rank's input (each rank regenerates the others' from their seeds), synchronously and
with async_op=True (Work.wait, is_completed, get_future), on the world group and on groups of some ranks; a loop's
calls named by their place in its period (the core's cache answers them); and the errors: ranks that disagree
(in such a loop too), bad arguments; receives from any source.

dist.init_process_group("hvdlite") is given nothing else: rank and size come from MPI (no MASTER_ADDR, RANK).
"""
import os
import zlib

import pytest
import torch
import torch.distributed as dist

import hvdlite.torch  # noqa: F401  (registers the backend)
from harness.checks import assert_raises
from harness.reference import reduce_reference
from harness.seeds import rank_generator

pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30),
              pytest.mark.across_hosts]

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]
TOL = {torch.float16: (5e-3, 1e-2), torch.bfloat16: (2e-2, 5e-2), torch.float32: (1e-5, 1e-5),
       torch.float64: (1e-12, 1e-12)}
OPS = {"sum": dist.ReduceOp.SUM, "average": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


@pytest.fixture(scope="module", autouse=True)
def process_group():
    torch.set_num_threads(1)
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        assert name not in os.environ, f"{name} is set: this test checks the rendezvous without it"
    dist.init_process_group("hvdlite")
    yield
    dist.destroy_process_group()


def make(dtype, rank, shape, salt, small=False):
    """Rank ``rank``'s input, exactly representable in dtype; ``small`` keeps products in range."""
    g = rank_generator(rank, zlib.crc32(repr(salt).encode()) % 100003)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        low, high = (0.5, 1.5) if small else (-2.0, 2.0)
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    low, high = ((1, 3) if small else (0, 40)) if dtype == torch.uint8 else ((1, 3) if small else (-40, 40))
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64).to(dtype)


def close(checks, label, got, want, dtype):
    rtol, atol = TOL.get(dtype, (0.0, 0.0))
    checks.close(label, got, want, rtol, atol)


def test_all_reduce_every_dtype_and_op(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            inputs = [make(dtype, r, (3, 5), ("ar", op_name), small=op_name == "product") for r in range(size)]
            want = reduce_reference(inputs, op_name)
            x = inputs[rank].clone()
            dist.all_reduce(x, op=op)
            checks.true(f"all_reduce {dtype} {op_name} keeps its dtype", x.dtype == dtype, str(x.dtype))
            close(checks, f"all_reduce {dtype} {op_name}", x, want, dtype)
            # async, on a non-contiguous view: the result lands in the view, the rest of its base untouched
            base = torch.zeros((5, 6), dtype=dtype)
            view = base.t()[:, :3]
            data = [make(dtype, r, (6, 3), ("view", op_name), small=op_name == "product") for r in range(size)]
            view.copy_(data[rank])
            work = dist.all_reduce(view, op=op, async_op=True)
            work.wait()
            checks.true(f"all_reduce {dtype} {op_name} async is_completed", work.is_completed())
            checks.true(f"all_reduce {dtype} {op_name} async no exception", work.exception() is None)
            close(checks, f"all_reduce {dtype} {op_name} non-contiguous", view, reduce_reference(data, op_name), dtype)
            checks.true(f"all_reduce {dtype} {op_name} rest of base untouched", bool((base.t()[:, 3:] == 0).all()))


def test_premul_sum_and_bitwise_ops(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        inputs = [make(dtype, r, (7,), "premul") for r in range(size)]
        x = inputs[rank].clone()
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.25))
        close(checks, f"premul_sum {dtype}", x, reduce_reference(inputs, "sum", prescale=0.25), dtype)
    for dtype in INTEGERS:
        inputs = [make(dtype, r, (4, 3), "bits") for r in range(size)]
        for name, op, fold in (("band", dist.ReduceOp.BAND, torch.bitwise_and),
                               ("bor", dist.ReduceOp.BOR, torch.bitwise_or),
                               ("bxor", dist.ReduceOp.BXOR, torch.bitwise_xor)):
            want = inputs[0].clone()
            for other in inputs[1:]:
                want = fold(want, other)
            x = inputs[rank].clone()
            dist.all_reduce(x, op=op)
            checks.true(f"{name} {dtype}", torch.equal(x, want), f"{x} != {want}")
    assert_raises(TypeError, dist.all_reduce, torch.ones(3), op=dist.ReduceOp.BAND, match=("integer or bool",))


def test_futures_carry_the_results_to_callbacks(checks):
    """What DDP's comm hooks rely on: a Work's future completes by itself (nobody waits on the Work) with the
    output tensors, and callbacks chained with then() run with them."""
    rank, size = dist.get_rank(), dist.get_world_size()
    inputs = [make(torch.float32, r, (16,), "future") for r in range(size)]
    x = inputs[rank].clone()
    fut = dist.all_reduce(x, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    close(checks, "then() on the all_reduce's future", fut.wait(), reduce_reference(inputs, "sum") * 2, torch.float32)
    works = [dist.all_reduce(torch.full((8,), float(rank + i)), async_op=True) for i in range(20)]
    results = torch.futures.collect_all([w.get_future() for w in works]).wait()
    for i, result in enumerate(results):
        want = sum(r + i for r in range(size))
        checks.true(f"future {i} of 20 in flight", torch.equal(result.value()[0], torch.full((8,), float(want))))


def one_call(checks, kind, shape, salt, label, group=None):
    """One call of a loop's step: kind on every rank's input of shape (reduce_scatter: each rank's share) in group
    (of every rank), checked against the reference."""
    rank, size = dist.get_rank(), dist.get_world_size()
    if kind == "broadcast":
        x = make(torch.float32, 0, shape, salt) if rank == 0 else torch.zeros(shape)
        dist.broadcast(x, src=0, group=group)
        close(checks, label, x, make(torch.float32, 0, shape, salt), torch.float32)
    elif kind == "all_gather":
        inputs = [make(torch.float32, r, shape, salt) for r in range(size)]
        out = torch.empty(size * shape[0], *shape[1:])
        dist.all_gather_into_tensor(out, inputs[rank], group=group)
        close(checks, label, out, torch.cat(inputs), torch.float32)
    elif kind == "reduce_scatter":
        inputs = [make(torch.float32, r, (size * shape[0], *shape[1:]), salt) for r in range(size)]
        out = torch.empty(shape)
        dist.reduce_scatter_tensor(out, inputs[rank], group=group)
        want = reduce_reference(inputs, "sum")[rank * shape[0]:(rank + 1) * shape[0]]
        close(checks, label, out, want, torch.float32)
    else:
        inputs = [make(torch.float32, r, shape, salt) for r in range(size)]
        x = inputs[rank].clone()
        dist.all_reduce(x, group=group)
        close(checks, label, x, reduce_reference(inputs, "sum"), torch.float32)


def test_calls_of_a_loop_are_named_by_their_place_in_its_period(checks):
    """A loop's calls repeat (DDP's buffers and buckets, FSDP's gathers and reduce-scatters every step): a single
    all-reduce, broadcast, all-gather or reduce-scatter is then named by its place in the period, the same name
    every step, which the core's response cache answers (rank 0's timeline lists the names). Every step's results
    match the reference on every rank; a burst of more all-reduces of one shape than the period holds waits its
    turn; a call that one rank then changes (an all-reduce's shape, an all-gather's size) is an error on every rank,
    not a stall, and the group goes on."""
    import json
    import tempfile

    import hvdlite.torch as hvd
    rank, size = dist.get_rank(), dist.get_world_size()
    directory = [tempfile.mkdtemp() if rank == 0 else None]
    dist.broadcast_object_list(directory)
    trace = os.path.join(directory[0], "trace.json")
    hvd.start_timeline(trace)
    step_calls = [("all_reduce", (1000,)), ("broadcast", (5,)), ("all_reduce", (37,)), ("all_gather", (6, 2)),
                  ("reduce_scatter", (4,)), ("all_reduce", (1000,))]
    steps = 12
    for step in range(steps):
        for i, (kind, shape) in enumerate(step_calls):
            one_call(checks, kind, shape, ("period", step, i), f"step {step}: {kind} {i}")
    # A burst of one shape, more than the period: the later calls of a name wait for the earlier.
    works = [(i, dist.all_reduce(torch.full((1000,), float(rank + i)), async_op=True)) for i in range(10)]
    for i, work in works:
        work.wait()
        checks.true(f"burst call {i}", torch.equal(work.result()[0], torch.full((1000,), float(sum(range(size)) +
                                                                                              size * i))))
    hvd.stop_timeline()
    if rank == 0:
        with open(trace) as f:
            names = [e["args"]["name"] for e in json.load(f) if e.get("ph") == "M" and e.get("name") == "thread_name"]
        periodic = sorted({n for n in names if ".p6." in n})
        checks.true("every call of the step named by its place in a period of 6", len(periodic) == 6,
                    str(sorted(set(names))[:20]))
    # One rank's all-gather changes its size (in a group of every rank: a failed call ends a group's periodic names),
    # then one rank's all-reduce its shape: every rank gets an error naming what differs, and the group goes on.
    # The new group first runs 3 steps, so that its names are periodic; the world group's are already.
    for group, steps_before, changed, shape in ((dist.new_group(list(range(size))), 3, 3, (7, 2)),
                                                (None, 0, 2, (38,))):
        for step in range(steps_before):
            for i, (kind, usual) in enumerate(step_calls):
                one_call(checks, kind, usual, ("change", changed, step, i), f"{kind} {i} before a change", group)
        for i, (kind, usual) in enumerate(step_calls[:changed]):
            one_call(checks, kind, usual, ("change", changed, steps_before, i), f"{kind} {i} before a change", group)
        kind, usual = step_calls[changed]
        x = torch.ones(shape if rank == size - 1 else usual)
        if kind == "all_reduce":
            error = assert_raises(dist.DistBackendError, dist.all_reduce, x, match=("shape",))
            checks.true("the error names both shapes", "[37]" in str(error) and "[38]" in str(error), str(error))
        else:
            out = torch.empty(size * x.shape[0], *x.shape[1:])
            assert_raises(ValueError, dist.all_gather_into_tensor, out, x, group=group,
                          match=("different numbers of elements",))
        for i, (kind, usual) in enumerate(step_calls):
            one_call(checks, kind, usual, ("after", changed, i), f"after the error: {kind} {i}", group)


def test_a_finished_call_holds_no_tensor(checks):
    """The record of a periodic name's last call (call_names.h), kept until that name comes back, holds none of the
    call's tensors once the caller has let go of them: nothing of a step is held until the next."""
    import gc
    import weakref
    rank, size = dist.get_rank(), dist.get_world_size()
    for kind in ("all_reduce", "broadcast"):
        for step in range(12):  # the same call again and again: a period of 1
            x = torch.full((1000,), float(rank + step))
            work = dist.all_reduce(x, async_op=True) if kind == "all_reduce" else dist.broadcast(x, 0, async_op=True)
            work.wait()
            want = sum(range(size)) + size * step if kind == "all_reduce" else float(step)
            checks.true(f"{kind} step {step}", torch.equal(x, torch.full((1000,), float(want))))
        # Checked before the next kind's calls, which take the same periodic name (and so replace the record).
        refs = (weakref.ref(x), weakref.ref(work.result()[0]))
        del x, work
        gc.collect()
        checks.true(f"the last {kind}'s tensor is freed", all(ref() is None for ref in refs))


def test_all_reduce_coalesced(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    shapes = [(3,), (2, 2), (5,)]
    inputs = [[make(torch.float64, r, s, ("coalesced", i)) for i, s in enumerate(shapes)] for r in range(size)]
    mine = [t.clone() for t in inputs[rank]]
    with pytest.warns(FutureWarning):
        dist.all_reduce_coalesced(mine)
    for i in range(len(shapes)):
        close(checks, f"coalesced tensor {i}", mine[i], reduce_reference([inputs[r][i] for r in range(size)], "sum"),
              torch.float64)


def test_coalescing_manager(checks):
    """FSDP's way of batching: all-gathers and reduce-scatters into tensors inside dist._coalescing_manager (one
    coalesced call each on the backend)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    inputs = [[make(torch.float32, r, (4,), ("cm", i)) for i in range(3)] for r in range(size)]
    outs = [torch.empty(4 * size) for _ in range(3)]
    with dist._coalescing_manager(async_ops=True) as manager:
        for i in range(3):
            dist.all_gather_into_tensor(outs[i], inputs[rank][i])
    manager.wait()
    for i in range(3):
        checks.true(f"coalesced all_gather_into_tensor {i}", torch.equal(outs[i], torch.cat([x[i] for x in inputs])))
    big = [make(torch.float64, r, (2 * size,), "cm rs") for r in range(size)]
    out = torch.empty(2, dtype=torch.float64)
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(out, big[rank])
    want = torch.as_tensor(reduce_reference(big, "sum"))[2 * rank:2 * rank + 2]
    close(checks, "coalesced reduce_scatter_tensor", out, want, torch.float64)


def test_broadcast_from_every_root(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for dtype in DTYPES + [torch.bool]:
        for root in range(size):
            x = make(dtype, rank, (2, 3), ("bcast", root))
            dist.broadcast(x, src=root)
            checks.true(f"broadcast {dtype} from {root}", torch.equal(x, make(dtype, root, (2, 3), ("bcast", root))))
    objects = [{"rank": rank, "list": list(range(rank + 2))}]
    dist.broadcast_object_list(objects, src=size - 1)
    checks.true("broadcast_object_list", objects[0] == {"rank": size - 1, "list": list(range(size + 1))},
                str(objects))


def test_gathers(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for dtype in (torch.int32, torch.float16, torch.float64, torch.bool):
        inputs = [make(dtype, r, (2, 3), ("gather", dtype)) for r in range(size)]
        outs = [torch.empty((2, 3), dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, inputs[rank])
        checks.true(f"all_gather {dtype}", all(torch.equal(outs[r], inputs[r]) for r in range(size)))
        out = torch.empty((size * 2, 3), dtype=dtype)
        dist.all_gather_into_tensor(out, inputs[rank])
        checks.true(f"all_gather_into_tensor {dtype}", torch.equal(out, torch.cat(inputs)))
        for root in range(size):
            gathered = [torch.empty((2, 3), dtype=dtype) for _ in range(size)] if rank == root else None
            dist.gather(inputs[rank], gathered, dst=root)
            if rank == root:
                checks.true(f"gather {dtype} to {root}", all(torch.equal(gathered[r], inputs[r]) for r in range(size)))
    objects = [None] * size
    dist.all_gather_object(objects, {"rank": rank, "payload": "x" * (rank * 37)})
    checks.true("all_gather_object (uneven pickles)",
                objects == [{"rank": r, "payload": "x" * (r * 37)} for r in range(size)], str(objects))


def test_scatter_and_reduce(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for root in range(size):
        pieces = [make(torch.float32, r, (4,), ("scatter", root)) for r in range(size)]
        out = torch.empty(4)
        dist.scatter(out, pieces if rank == root else None, src=root)
        checks.true(f"scatter from {root}", torch.equal(out, pieces[rank]))
        for op_name in ("sum", "max"):
            inputs = [make(torch.float64, r, (3, 2), ("reduce", root, op_name)) for r in range(size)]
            x = inputs[rank].clone()
            dist.reduce(x, dst=root, op=OPS[op_name])
            if rank == root:
                close(checks, f"reduce {op_name} to {root}", x, reduce_reference(inputs, op_name), torch.float64)
            else:
                checks.true(f"reduce {op_name} to {root} leaves non-roots alone", torch.equal(x, inputs[rank]))


def test_reduce_scatters(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    for op_name in ("sum", "average", "min"):
        inputs = [make(torch.float64, r, (size * 3, 2), ("rs", op_name)) for r in range(size)]
        want = torch.as_tensor(reduce_reference(inputs, op_name))
        out = torch.empty((3, 2), dtype=torch.float64)
        dist.reduce_scatter_tensor(out, inputs[rank], op=OPS[op_name])
        close(checks, f"reduce_scatter_tensor {op_name}", out, want[rank * 3:(rank + 1) * 3], torch.float64)
        out = torch.empty((3, 2), dtype=torch.float64)
        dist.reduce_scatter(out, list(inputs[rank].chunk(size)), op=OPS[op_name])
        close(checks, f"reduce_scatter {op_name}", out, want[rank * 3:(rank + 1) * 3], torch.float64)
    # pieces of different sizes: rank r receives r + 1 elements
    sizes = [r + 1 for r in range(size)]
    inputs = [make(torch.float32, r, (sum(sizes),), "uneven") for r in range(size)]
    want = torch.as_tensor(reduce_reference(inputs, "sum")).split(sizes)
    out = torch.empty(sizes[rank])
    dist.reduce_scatter(out, list(inputs[rank].split(sizes)))
    close(checks, "reduce_scatter of uneven pieces", out, want[rank], torch.float32)


def test_all_to_all(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    # equal pieces
    inputs = [make(torch.int64, r, (size * 2, 3), "a2a") for r in range(size)]
    out = torch.empty((size * 2, 3), dtype=torch.int64)
    dist.all_to_all_single(out, inputs[rank])
    want = torch.cat([inputs[r][rank * 2:(rank + 1) * 2] for r in range(size)])
    checks.true("all_to_all_single", torch.equal(out, want))
    # rank r sends (r + d + 1) rows to rank d
    rows = [[r + d + 1 for d in range(size)] for r in range(size)]
    inputs = [make(torch.float32, r, (sum(rows[r]), 2), "a2a splits") for r in range(size)]
    received = [rows[r][rank] for r in range(size)]
    out = torch.empty((sum(received), 2))
    dist.all_to_all_single(out, inputs[rank], output_split_sizes=received, input_split_sizes=rows[rank])
    want = torch.cat([inputs[r].split(rows[r])[rank] for r in range(size)])
    checks.true("all_to_all_single with splits", torch.equal(out, want))
    # lists of tensors of different sizes
    ins = [[make(torch.float64, r, (r + d + 1,), ("a2a list", d)) for d in range(size)] for r in range(size)]
    outs = [torch.empty(r + rank + 1, dtype=torch.float64) for r in range(size)]
    dist.all_to_all(outs, ins[rank])
    checks.true("all_to_all of lists", all(torch.equal(outs[r], ins[r][rank]) for r in range(size)))


def test_send_recv_around_the_ring(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(3):
        outgoing = make(torch.float32, rank, (5,), ("ring", step))
        incoming = torch.empty(5)
        works = [dist.isend(outgoing, right), dist.irecv(incoming, left)]
        for work in works:
            work.wait()
        checks.true(f"ring step {step}", torch.equal(incoming, make(torch.float32, left, (5,), ("ring", step))))
    # tags keep messages apart; messages of one tag arrive in the order they were sent
    if rank == 0:
        for tag, value in ((7, 1.0), (7, 2.0), (3, 3.0)):
            dist.send(torch.full((2,), value), 1, tag=tag)
    elif rank == 1:
        got = {}
        for tag in (3, 7, 7):
            t = torch.empty(2)
            dist.recv(t, 0, tag=tag)
            got.setdefault(tag, []).append(float(t[0]))
        checks.true("tags and order", got == {3: [3.0], 7: [1.0, 2.0]}, str(got))
    dist.barrier()


def test_recv_from_any_source(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    sent = 3  # messages of 4 elements each rank but 0 sends rank 0 (buffered: all go at once)
    if rank == 0:
        # Taken from whichever rank's message arrives first, each rank's in the order it sent them.
        got = {}
        for _ in range(2 * (size - 1)):
            t = torch.empty(2, 2)  # the element count is what sender and receiver agree on, not the shape
            sender = dist.recv(t)
            got.setdefault(sender, []).append(float(t[0, 0]))
            checks.true("the whole message", torch.equal(t, torch.full((2, 2), t[0, 0].item())))
        # The rest by name: a receive still posted from a rank that did not answer the last one holds its next.
        for r in range(1, size):
            for _ in range(sent - len(got.get(r, []))):
                t = torch.empty(4)
                dist.recv(t, r)
                got.setdefault(r, []).append(float(t[0]))
        want = {r: [10.0 * r + i for i in range(sent)] for r in range(1, size)}
        checks.true("every message once, each rank's in the order sent", got == want, str(got))
        # irecv from any source: the Work says who sent it
        work = dist.irecv(torch.empty(1))
        work.wait()
        checks.true("irecv from any source names its sender", work._source_rank() == size - 1,
                    str(work._source_rank()))
        assert_raises(TypeError, dist.recv, torch.empty(2, dtype=torch.uint32), match=("dtype",))
    else:
        for i in range(sent):
            dist.send(torch.full((4,), 10.0 * rank + i), 0)
        if rank == size - 1:
            dist.send(torch.ones(1), 0)
    dist.barrier()
    # On a new group, the last rank takes one message from any source, and only rank 0 sends it one: the pairs it
    # asked for with the other ranks are never made, and the group still goes away at once when destroyed.
    group = dist.new_group(list(range(size)))
    last = size - 1
    if rank == last:
        t = torch.empty(3)
        sender = dist.recv(t, group=group)
        checks.true("from rank 0 of the group", sender == 0 and torch.equal(t, torch.full((3,), 5.0)), str(sender))
    elif rank == 0:
        dist.send(torch.full((3,), 5.0), last, group=group)
    dist.barrier()
    dist.destroy_process_group(group)
    checks.true("the world group still works", all_reduced_ones() == size)


def all_reduced_ones():
    x = torch.ones(1)
    dist.all_reduce(x)
    return int(x.item())


def test_groups_of_some_ranks(checks):
    rank, size = dist.get_rank(), dist.get_world_size()
    members = [0, size - 1]
    group = dist.new_group(members)  # every rank calls new_group; only members make its backend
    others = dist.new_group([r for r in range(size) if r not in members] or [0])
    if rank in members:
        inputs = [make(torch.float32, r, (6,), "group") for r in members]
        x = inputs[members.index(rank)].clone()
        dist.all_reduce(x, group=group)
        close(checks, "all_reduce on a group of some ranks", x, reduce_reference(inputs, "sum"), torch.float32)
        y = torch.full((2,), float(rank))
        dist.broadcast(y, src=size - 1, group=group)  # a global rank, as torch takes it
        checks.true("broadcast on the group", torch.equal(y, torch.full((2,), float(size - 1))))
    if size > 2 and rank not in members:
        x = torch.ones(3)
        dist.all_reduce(x, group=others)
        checks.true("the other group", torch.equal(x, torch.full((3,), float(size - 2))))
    # a 1-D DeviceMesh over every rank
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (size,))
    x = torch.full((2,), float(rank))
    dist.all_reduce(x, group=mesh.get_group())
    checks.true("DeviceMesh group", torch.equal(x, torch.full((2,), float(sum(range(size))))))


def test_disagreements_are_errors_on_every_rank(checks):
    rank = dist.get_rank()
    x = torch.ones(3 + rank)
    error = assert_raises(dist.DistBackendError, dist.all_reduce, x, match=("shape",))
    checks.true("the error names the ranks' shapes", "[3]" in str(error) and "[4]" in str(error), str(error))
    work = dist.all_reduce(torch.ones(2, dtype=torch.float32 if rank == 0 else torch.float64), async_op=True)
    assert_raises(dist.DistBackendError, work.wait, match=("data types",))
    checks.true("a failed Work reports its exception", work.exception() is not None)
    assert_raises(ValueError, dist.all_gather_into_tensor, torch.empty(5), torch.ones(2), match=("output of",))
    # and the group still works
    y = torch.ones(2)
    dist.all_reduce(y)
    checks.true("all_reduce after the errors", torch.equal(y, torch.full((2,), float(dist.get_world_size()))))
