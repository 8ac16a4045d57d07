"""The per-tensor calls made in C (hvdlite._tensor_calls, native/python/), on real MPI ranks: prepared requests resubmitted
with new buffers step after step (as arrays and as addresses, submitted, and submitted and waited for), handles dropped before their
collective finished (their memory must live until it has), released handles, buffers the core cannot use, a
prepared group pointed at new buffers in one call, a failing member of wait_all, Handle.finish (wait and
release in one call), one-off Requests (filled in
C, or by requests.py for what C leaves to it), and prepared requests' tokens (a name shared with submissions
by value, duplicates, a request dropped in flight, a removed process set, a token from before init() again), and a
core-allocated output read through its handle (the array outliving the dropped handle). Every result is checked
against a float64 reference.
"""
import gc
import time
import weakref

import numpy as np
import pytest

import hvdlite as hvd
from hvdlite import _tensor_calls
from hvdlite.requests import (Collective, PreparedGroup, PreparedRequest, Request, release_all, submit, submit_and_wait,
                              submit_group, wait_all)
from harness.checks import assert_raises
from harness.reference import check_close, rank_input, reduce_reference


pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),  # a bug fails fast instead of hanging
              pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()



def prepared(name, dtype, shape, op=hvd.Sum):
    return PreparedRequest(Request(Collective.ALLREDUCE, name, dtype, shape, op=op))


def test_prepared_reuse():
    rank, size = hvd.rank(), hvd.size()
    # One request filled once, given new arrays every step; each form of buffer, submitted, and submitted and waited for.
    for dtype in ("float32", "bfloat16", "int64"):
        request = prepared(f"hot.reuse.{dtype}", dtype, (3, 5))
        for step in range(6):
            x = rank_input(dtype, (3, 5), rank, "sum", ("reuse", dtype, step))
            out = np.empty_like(x)
            if step % 3 == 0:
                handle = request.submit(x, out, (x, out))
                handle.wait()
            elif step % 3 == 1:
                handle = request.submit(x.ctypes.data, out.ctypes.data, (x, out))
                wait_all([handle])
            else:
                handle = request.submit_and_wait(x, out, (x, out))
            assert handle.poll(), "a waited handle must poll as done"
            handle.release()
            inputs = [rank_input(dtype, (3, 5), r, "sum", ("reuse", dtype, step)) for r in range(size)]
            check_close(request.name, out, reduce_reference(inputs, "sum"), dtype, f"step {step}")
    # In place, as the torch optimizer reduces a gradient.
    request = prepared("hot.inplace", "float64", (7,), op=hvd.Average)
    for step in range(3):
        x = rank_input("float64", (7,), rank, "average", ("inplace", step))
        request.submit_and_wait(x, x, x).release()
        inputs = [rank_input("float64", (7,), r, "average", ("inplace", step)) for r in range(size)]
        check_close("hot.inplace", x, reduce_reference(inputs, "average"), "float64", f"step {step}")


def expect_sum(name, out, what, size, dtype="float32"):
    check_close(name, out, np.full(out.shape, size * (size + 1) / 2), dtype, what)


def test_prepared_tokens():
    rank, size = hvd.rank(), hvd.size()
    # A prepared request is known to the core by a token and submitted as token + buffers; the core must still
    # see every change made to its name by others, and refuse what it would refuse by value.
    ones = lambda shape, dtype="float32": np.full(shape, rank + 1.0, dtype)  # noqa: E731
    # The same name prepared (float32, (4,)) and submitted by value (float64, (2, 3)), alternately: each
    # submission runs with its own description, not the other's.
    shared = prepared("hot.token.shared", "float32", (4,))
    assert shared.token > 0, "a request prepared after init must have a token"
    for step in range(3):
        x = ones(4)
        shared.submit_and_wait(x, x, x).release()
        expect_sum("hot.token.shared", x, f"prepared, step {step}", size)
        y = ones((2, 3), "float64")
        submit_and_wait(Request(Collective.ALLREDUCE, "hot.token.shared", "float64", y.shape, y.ctypes.data, y.ctypes.data,
                    op=hvd.Sum, keepalive=y)).release()
        expect_sum("hot.token.shared", y, f"by value, step {step}", size, "float64")
    # In flight, the token is refused as a duplicate (by value too), and nothing is left in flight by it.
    x = ones(4)
    handle = shared.submit(x, x, x)
    assert_raises(ValueError, lambda: shared.submit(x, x, x), match=["Duplicate tensor name", "hot.token.shared"])
    assert_raises(ValueError, lambda: submit(Request(Collective.ALLREDUCE, "hot.token.shared", "float32", (4,), x.ctypes.data,
                                        x.ctypes.data, op=hvd.Sum, keepalive=x)), match=["Duplicate tensor name", "hot.token.shared"])
    handle.wait()
    handle.release()
    expect_sum("hot.token.shared", x, "after the refused duplicates", size)
    # A group naming one prepared request twice is refused whole; its members are not left in flight.
    a, b = ones(4), ones(4)
    twice = PreparedGroup([Request(Collective.ALLREDUCE, "hot.token.twice", "float32", (4,), a.ctypes.data,
                                   a.ctypes.data, op=hvd.Sum, keepalive=a)] * 2)
    assert_raises(ValueError, twice.submit, match=["Duplicate tensor name", "hot.token.twice"])
    once = prepared("hot.token.twice", "float32", (4,))
    once.submit_and_wait(b, b, b).release()
    expect_sum("hot.token.twice", b, "after the refused group", size)
    # Dropped while in flight: the request still completes, and its name is free afterwards.
    c = ones(4)
    dropped = prepared("hot.token.dropped", "float32", (4,))
    handle = dropped.submit(c, c, c)
    del dropped
    gc.collect()
    handle.wait()
    handle.release()
    expect_sum("hot.token.dropped", c, "prepared request dropped in flight", size)
    d = ones(4)
    submit_and_wait(Request(Collective.ALLREDUCE, "hot.token.dropped", "float32", (4,), d.ctypes.data, d.ctypes.data,
                op=hvd.Sum, keepalive=d)).release()
    expect_sum("hot.token.dropped", d, "by value after the drop", size)
    # Prepared in a process set that is then removed: checked again, it is refused naming the set and tensor. A
    # rank outside the set gets no token, and the same refusal as by value.
    subset = hvd.add_process_set(list(range(size - 1)))
    in_set = PreparedRequest(Request(Collective.ALLREDUCE, "hot.token.set", "float32", (4,), op=hvd.Sum,
                                     process_set=subset))
    e = ones(4)
    if rank < size - 1:
        in_set.submit_and_wait(e, e, e).release()
        check_close("hot.token.set", e, np.full(4, (size - 1) * size / 2), "float32", "in an added process set")
    else:
        assert in_set.token == 0, "a rank outside the set must get no token"
        assert_raises(ValueError, lambda: in_set.submit(e, e, e), match=["not a member", "hot.token.set"])
    set_id = subset.process_set_id
    assert hvd.remove_process_set(subset)
    assert_raises(ValueError, lambda: in_set.submit(e, e, e), match=[f"process set {set_id} does not exist", "hot.token.set"])
    return shared





def test_named_numpy_calls():
    rank, size = hvd.rank(), hvd.size()
    # hvd.allreduce(_async) reuse one prepared request per (name, dtype, shape, op, ...): a name that changes
    # shape or op between calls must get a request of its own each time.
    for step, (shape, op_name) in enumerate([((4,), "sum"), ((2, 3), "sum"), ((2, 3), "max"), ((4,), "sum")]):
        op = {"sum": hvd.Sum, "max": hvd.Max}[op_name]
        x = rank_input("float32", shape, rank, op_name, ("named", step))
        sync = hvd.allreduce(x, name="hot.named", op=op)
        async_ = hvd.synchronize(hvd.allreduce_async(x, name="hot.named.async", op=op))
        inputs = [rank_input("float32", shape, r, op_name, ("named", step)) for r in range(size)]
        for what, got in (("allreduce", sync), ("allreduce_async", async_)):
            assert got.shape == shape, f"{what} step {step}: shape {got.shape}, expected {shape}"
            check_close("hot.named", got, reduce_reference(inputs, op_name), "float32", f"{what} step {step}")


def test_dropped_handle():
    rank, size = hvd.rank(), hvd.size()
    # Rank 0 drops its handle while the collective cannot finish (the last rank submits later): the input
    # must stay alive (the core reads it) until it has, and then be let go.
    request = prepared("hot.dropped", "float32", (1000,))
    x = rank_input("float32", (1000,), rank, "sum", "dropped")
    out = np.zeros_like(x)
    inputs = [rank_input("float32", (1000,), r, "sum", "dropped") for r in range(size)]
    if rank == size - 1:
        time.sleep(0.5)
        handle = request.submit(x, out, (x, out))
        handle.wait()
        handle.release()
    else:
        handle = request.submit(x, out, (x,))
        alive = weakref.ref(x)
        del x, handle
        gc.collect()
        assert _tensor_calls.orphans() == 1, f"orphans: {_tensor_calls.orphans()}, expected 1 (the collective is waiting)"
        assert alive() is not None, "the input of a running collective was freed"
        deadline = time.monotonic() + 30
        while _tensor_calls.orphans() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _tensor_calls.orphans() == 0, "a finished collective's dropped handle was never given back"
        gc.collect()
        assert alive() is None, "the input of a finished, dropped handle is kept forever"
    check_close("hot.dropped", out, reduce_reference(inputs, "sum"), "float32", "dropped handle")


def test_released_handle():
    rank, size = hvd.rank(), hvd.size()
    x = np.ones(4, np.float32)
    handle = prepared("hot.released", "float32", (4,)).submit(x, x, x)
    handle.wait()
    handle.release()
    handle.release()  # again: nothing
    assert handle._id is None
    assert_raises(hvd.HvdliteError, handle.wait, match=["hot.released", "already released"])
    assert_raises(hvd.HvdliteError, handle.poll, match=["hot.released", "already released"])
    assert_raises(hvd.HvdliteError, lambda: wait_all([handle]), match=["hot.released", "already released"])
    release_all([handle])  # released ones are skipped


def test_finish():
    rank, size = hvd.rank(), hvd.size()
    # Handle.finish(): wait, then release whatever happened. The first of a fused step's handles waits; the
    # others have finished by then and are released under one lock. Each result right, each handle released,
    # the memory it kept dropped; a failed request raises its error on every rank and is released too.
    requests = [prepared(f"hot.finish.{i}", "float32", (64 + i,)) for i in range(8)]
    inputs = [rank_input("float32", (64 + i,), rank, "sum", ("finish", i)) for i in range(8)]
    outs = [np.empty_like(x) for x in inputs]
    kept = [weakref.ref(x) for x in inputs]
    handles = [r.submit(x, out, x) for r, x, out in zip(requests, inputs, outs)]
    del inputs
    for i, (handle, out) in enumerate(zip(handles, outs)):
        assert handle.finish() is None
        assert handle._id is None, f"hot.finish.{i}: finish() left the handle unreleased"
        references = [rank_input("float32", (64 + i,), r, "sum", ("finish", i)) for r in range(size)]
        check_close(f"hot.finish.{i}", out, reduce_reference(references, "sum"), "float32", "finish()")
    assert all(k() is None for k in kept), "finish() kept the inputs alive"
    assert_raises(hvd.HvdliteError, handles[0].finish, match=["hot.finish.0", "already released"])
    z = np.ones(3 + rank, np.float32)
    failing = submit(Request(Collective.ALLREDUCE, "hot.finish.disagree", "float32", z.shape, z.ctypes.data,
                             z.ctypes.data, keepalive=z))
    assert_raises(hvd.HvdliteError, failing.finish, match=["hot.finish.disagree", "shape"])
    assert failing._id is None, "a failed finish() left the handle unreleased"


def test_core_allocated_output():
    rank, size = hvd.rank(), hvd.size()
    # An allgather's output is allocated by the core and read through the handle (C methods): its shape, and its
    # bytes as a view that keeps the handle, so it stays valid when the handle object is dropped.
    rows = rank + 1
    x = np.full((rows, 3), rank + 0.5, dtype=np.float64)
    handle = submit(Request(Collective.ALLGATHER, "hot.gathered", "float64", x.shape, x.ctypes.data, 0, keepalive=x))
    handle.wait()
    shape = handle.output_shape()
    assert shape == (size * (size + 1) // 2, 3), f"allgather output shape {shape}"
    raw = handle.output_buffer()
    del handle
    gc.collect()
    got = np.frombuffer(raw, np.float64).reshape(shape)
    expected = np.concatenate([np.full((r + 1, 3), r + 0.5) for r in range(size)])
    check_close("hot.gathered", got, expected, "float64", "allgather output read after the handle was dropped")
    del raw, got
    gc.collect()
    assert _tensor_calls.orphans() == 0, "a finished allgather's handle was not given back with its last array"
    released = submit(Request(Collective.ALLGATHER, "hot.gathered.released", "float64", x.shape, x.ctypes.data, 0,
                              keepalive=x))
    released.wait()
    released.release()
    for read in (released.output_shape, released.output_buffer, released.received_splits, released.result):
        assert_raises(hvd.HvdliteError, read, match=["hot.gathered.released", "already released"])


def test_unusable_buffers():
    rank, size = hvd.rank(), hvd.size()
    request = prepared("hot.buffers", "float32", (4,))
    x = np.ones(4, np.float32)
    read_only = np.ones(4, np.float32)
    read_only.setflags(write=False)
    assert_raises(ValueError, lambda: request.submit(x, read_only, x), match=["output", "hot.buffers", "read-only"])
    assert_raises(TypeError, lambda: request.submit("not a buffer", x, x), match=["input", "hot.buffers"])
    assert_raises(TypeError, lambda: request.submit(x, x), match=["submit", "3 arguments (2 given)"])
    assert_raises(TypeError, lambda: request.submit_and_wait(x, x, x, x), match=["submit_and_wait", "3 arguments (4 given)"])
    assert_raises(ValueError, lambda: PreparedRequest.__new__(PreparedRequest).submit(x, x, x), match=["never filled"])
    # Nothing was left in flight by the refusals: the name goes through now, on every rank.
    out = np.empty_like(x)
    request.submit_and_wait(x, out, (x, out)).release()
    check_close("hot.buffers", out, np.full(4, float(size)), "float32", "after refused buffers")


def test_prepared_group_buffers():
    rank, size = hvd.rank(), hvd.size()
    # A prepared group pointed at new buffers every step by one C call (arrays, then addresses), each member
    # checked; buffers it cannot use raise naming the member and leave nothing submitted.
    shapes = [(3,), (2, 5), (7,)]
    group = PreparedGroup([Request(Collective.ALLREDUCE, f"hot.grp.{i}", "float64", s, op=hvd.Sum)
                           for i, s in enumerate(shapes)])
    for step in range(4):
        inputs = [rank_input("float64", s, rank, "sum", ("grp", step, i)) for i, s in enumerate(shapes)]
        outputs = [np.empty_like(x) for x in inputs]
        if step % 2:
            handle = group.submit([x.ctypes.data for x in inputs], [o.ctypes.data for o in outputs], (inputs, outputs))
        else:
            handle = group.submit(inputs, outputs, (inputs, outputs))
        handle.wait()
        handle.release()
        for i, (s, out) in enumerate(zip(shapes, outputs)):
            everyone = [rank_input("float64", s, r, "sum", ("grp", step, i)) for r in range(size)]
            check_close(f"hot.grp.{i}", out, reduce_reference(everyone, "sum"), "float64", f"group step {step}")
    xs = [np.ones(s) for s in shapes]
    read_only = np.ones(shapes[1])
    read_only.setflags(write=False)
    assert_raises(ValueError, lambda: group.submit(xs, [np.empty(shapes[0]), read_only, np.empty(shapes[2])], xs), match=["output", "hot.grp.1", "read-only"])
    assert_raises(TypeError, lambda: group.submit(xs[:2] + ["not a buffer"], xs, xs), match=["input", "hot.grp.2"])
    assert_raises(ValueError, lambda: group.submit(xs[:2], xs[:2], xs), match=["3 requests", "got 2"])
    assert_raises(ValueError, lambda: PreparedGroup.__new__(PreparedGroup).submit(xs, xs), match=["never filled"])
    assert_raises(TypeError, lambda: _tensor_calls.point_arrays(xs, xs, hvd.Sum, 1.0, 1.0, None), match=["PreparedGroup"])
    outs = [np.empty_like(x) for x in xs]
    handle = group.submit(xs, outs, (xs, outs))  # nothing was left in flight by the refusals
    handle.wait()
    handle.release()
    for i, (s, out) in enumerate(zip(shapes, outs)):
        check_close(f"hot.grp.{i}", out, np.full(s, float(size)), "float64", "after refused group buffers")


def test_failing_member():
    rank, size = hvd.rank(), hvd.size()
    # The second of three all-reduces disagrees on its shape across ranks: wait_all raises its error, naming
    # it and the shapes, on every rank; the others still complete correctly.
    shapes = {"hot.group.a": (5,), "hot.group.b": (4 + rank,), "hot.group.c": (6,)}
    arrays = {name: np.full(shape, rank + 1.0, np.float32) for name, shape in shapes.items()}
    handles = [submit(Request(Collective.ALLREDUCE, name, "float32", a.shape, a.ctypes.data, a.ctypes.data,
                              op=hvd.Sum, keepalive=a)) for name, a in arrays.items()]
    assert_raises(hvd.HvdliteError, lambda: wait_all(handles), match=["hot.group.b", "shape"])
    release_all(handles)
    total = size * (size + 1) / 2
    for name in ("hot.group.a", "hot.group.c"):
        check_close(name, arrays[name], np.full(shapes[name], total), "float32", "beside a failing member")


def test_plain_requests():
    rank, size = hvd.rank(), hvd.size()
    # submit(Request), as the adapters' one-off collectives call it, with int addresses or the arrays themselves
    # (address()): the same results, and every refusal names the tensor.
    from hvdlite.requests import address
    cases = [("float32", (3, 4), "sum", 1.0, 1.0), ("float64", (5,), "average", 1.0, 1.0),
             ("int32", (2, 2, 2), "max", 1.0, 1.0), ("float32", (6,), "sum", 0.5, 3.0), ("int64", (), "sum", 1.0, 1.0)]
    ops = {"sum": hvd.Sum, "average": hvd.Average, "max": hvd.Max}
    for i, (dtype, shape, op_name, pre, post) in enumerate(cases):
        for pointers in ("ints", "buffers"):
            name = f"hot.plain.{i}.{pointers}"
            x = rank_input(dtype, shape, rank, op_name, ("plain", i))
            out = np.zeros_like(x)
            where = (x.ctypes.data, out.ctypes.data) if pointers == "ints" else (address(x), address(out))
            request = Request(Collective.ALLREDUCE, name, dtype, list(shape), *where, op=ops[op_name],
                              prescale_factor=pre, postscale_factor=post, keepalive=(x, out))
            handle = submit(request) if i % 2 == 0 else submit_and_wait(request)
            handle.wait()
            handle.release()
            inputs = [rank_input(dtype, shape, r, op_name, ("plain", i)) for r in range(size)]
            check_close(name, out, reduce_reference(inputs, op_name, pre, post), dtype, f"submit(Request) {pointers}")
    x = np.arange(4, dtype=np.float32) + rank
    submit_and_wait(Request(Collective.BROADCAST, "hot.plain.bcast", "float32", x.shape, x.ctypes.data, x.ctypes.data,
                root_rank=size - 1, keepalive=x)).release()
    check_close("hot.plain.bcast", x, np.arange(4, dtype=np.float64) + size - 1, "float32", "broadcast")
    # What the fill refuses, naming the tensor, before anything is sent (so nothing is left in flight).
    y = np.ones(4, np.float32)
    assert_raises(TypeError, lambda: submit(Request(Collective.ALLREDUCE, "hot.plain.bad", "complex64", (4,), y.ctypes.data,
                                        y.ctypes.data, keepalive=y)), match=["hot.plain.bad", "complex64"])
    assert_raises(ValueError, lambda: submit(Request(Collective.ALLREDUCE, "hot.plain.set", "float32", (4,), y.ctypes.data,
                                        y.ctypes.data, process_set=hvd.ProcessSet([0]), keepalive=y)), match=["not been added"])
    assert_raises(ValueError, lambda: submit_and_wait(Request(Collective.ALLREDUCE, "hot.plain.shape", "float32", (-4,), y.ctypes.data,
                                     y.ctypes.data, keepalive=y)), match=["hot.plain.shape"])
    bad = dict(collective=Collective.ALLREDUCE, dtype="float32", shape=(4,), input_ptr=y, output_ptr=y, keepalive=y)
    assert_raises(TypeError, lambda: submit(Request(name="hot.plain.op", **{**bad, "op": "sum"})), match=["hot.plain.op", "op must be an int"])
    assert_raises(TypeError, lambda: submit(Request(name="hot.plain.pre", **bad, prescale_factor="2")), match=["hot.plain.pre", "prescale_factor"])
    assert_raises(TypeError, lambda: submit(Request(name="hot.plain.gpu", **bad, gpu=(0,))), match=["hot.plain.gpu", "gpu must be"])
    assert_raises(TypeError, lambda: submit(Request(name=7, **bad)), match=["name must be a str"])
    assert_raises(ValueError, lambda: submit(Request(Collective.ALLTOALL, "hot.plain.splits", "float32", (4,), y, 0,
                                                     splits=[4] * (size + 1), keepalive=y)),
                  match=["hot.plain.splits", f"one entry per rank of the process set ({size})", f"got {size + 1}"])
    read_only = np.ones(4, np.float32)
    read_only.setflags(write=False)
    good = Request(Collective.ALLREDUCE, "hot.plain.group.0", "float32", (4,), y, y, keepalive=y)
    assert_raises(ValueError, lambda: submit_group([good, Request(name="hot.plain.group.1", **{**bad, "output_ptr": read_only})]),
                  match=["hot.plain.group.1", "output", "read-only"])
    # A collective that fails on every rank (the shapes disagree): submit_and_wait raises its error and releases the handle.
    z = np.ones(3 + rank, np.float32)
    assert_raises(hvd.HvdliteError, lambda: submit_and_wait(Request(Collective.ALLREDUCE, "hot.plain.disagree", "float32", z.shape, z.ctypes.data,
                                     z.ctypes.data, keepalive=z)), match=["hot.plain.disagree", "shape"])


def test_no_dropped_handle_is_left_behind():
    assert _tensor_calls.orphans() == 0, f"{_tensor_calls.orphans()} dropped handles left"



def test_tokens_after_restart():
    rank, size = hvd.rank(), hvd.size()
    shared = prepared("hot.token.shared", "float32", (4,))
    x = np.full(4, rank + 1.0, np.float32)
    shared.submit_and_wait(x, x, x).release()
    expect_sum("hot.token.shared", x, "prepared before init() again", size)
    hvd.shutdown()
    hvd.init()
    # Prepared before a shutdown: the new core does not know the token, and the request goes by value.
    x = np.full(4, rank + 1.0, np.float32)
    shared.submit_and_wait(x, x, x).release()
    expect_sum("hot.token.shared", x, "prepared before init() again", size)
    again = prepared("hot.token.again", "float32", (4,))
    assert again.token not in (0, shared.token), "a request prepared after init() again needs a new token"
    x = np.full(4, rank + 1.0, np.float32)
    again.submit_and_wait(x, x, x).release()
    expect_sum("hot.token.again", x, "prepared after init() again", size)
