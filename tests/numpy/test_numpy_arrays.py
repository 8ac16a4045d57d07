"""The NumPy all-reduces made in C (native/python/array_collectives.c), on real MPI ranks: every dtype and the
array layouts the C path hands to Python (strided, Fortran order, 0-d, lists, byte-swapped), names whose dtype,
shape, op, scale factors or process set change between calls, Horovod's arguments bound by position and keyword,
int handles (poll, synchronize twice, many in flight), names in the last step's order or not (the C path's call
order), errors on every rank (shapes that disagree, unsupported dtypes), grouped all-reduces whose members change, outputs recycled only when nobody holds them, the arena their
memory comes from (packed, resizable, bounded), references that must not leak, and calls after shutdown.
Every result is checked against a float64 reference.
"""
import inspect
import sys
import warnings
import weakref

import numpy as np
import pytest

import hvdlite as hvd
from hvdlite import _tensor_calls, ops
from harness.checks import assert_raises
from harness.reference import DTYPES, check_close, rank_input, reduce_reference

pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),  # a bug fails fast instead of hanging
              pytest.mark.across_hosts, pytest.mark.openmpi,
              pytest.mark.sanitize(address=True)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}


def reference(dtype, shape, op, size, seed, prescale=1.0, postscale=1.0):
    inputs = [rank_input(dtype, shape, r, op, seed) for r in range(size)]
    return reduce_reference(inputs, op, prescale, postscale)


def test_every_dtype_and_op():
    rank, size = hvd.rank(), hvd.size()
    # Each call twice with one name: the first prepares the request, the second runs from C with it.
    for dtype in DTYPES:
        for op in OPS:
            for call in range(2):
                seed = (dtype, op, call)
                name = f"arrays.{dtype}.{op}"
                x = rank_input(dtype, (3, 4), rank, op, seed)
                got = (hvd.allreduce(x, name=name, op=OPS[op]) if call == 0 else
                       hvd.synchronize(hvd.allreduce_async(x, name=name + ".async", op=OPS[op])))
                assert got.dtype == x.dtype and got.shape == x.shape, (name, got.dtype, got.shape)
                check_close(name, got, reference(dtype, (3, 4), op, size, seed), dtype, f"call {call}")
    # bool is carried by allgather, broadcast and alltoall, not reduced: refused on every rank, naming it.
    for call in range(2):
        assert_raises(ValueError, lambda: hvd.allreduce(np.ones(3, bool), name="arrays.bool", op=hvd.Sum), match=["arrays.bool", "bool"])
    # int64 spelled as C long long ('q') and as C long ('l'): both are the core's int64.
    for code in ("q", "l"):
        x = rank_input("int64", (5,), rank, "sum", code).astype(code)
        got = hvd.allreduce(x, name=f"arrays.int64.{code}", op=hvd.Sum)
        check_close(f"int64 '{code}'", got, reference("int64", (5,), "sum", size, code), "int64", "")


def test_layouts():
    rank, size = hvd.rank(), hvd.size()
    # What C leaves to Python: each must come back right, in the input's logical shape.
    base = rank_input("float32", (6, 8), rank, "sum", "layouts")
    expected = reference("float32", (6, 8), "sum", size, "layouts")
    cases = {
        "strided": (base[:, ::2], expected[:, ::2]),
        "fortran": (np.asfortranarray(base), expected),
        "transposed": (base.T, expected.T),
        "list": (base.tolist(), expected),
        "byteswapped": (base.astype(">f4"), expected),
        "scalar": (base[0, 0], expected[0, :1]),
    }
    for step in range(2):  # twice: the second call finds the name prepared
        for label, (x, want) in cases.items():
            got = hvd.synchronize(hvd.allreduce_async(x, name=f"arrays.layout.{label}", op=hvd.Sum))
            check_close(f"arrays.layout.{label}", got, want.reshape(got.shape), "float32", f"step {step}")
            assert got.shape == np.shape(want) or label == "scalar", (label, got.shape)
            assert got.dtype.isnative, (label, got.dtype)


def test_name_changes_between_calls():
    rank, size = hvd.rank(), hvd.size()
    # One name; every call changes one thing the prepared request holds: each call must be made afresh.
    calls = [("float32", (4,), "sum", 1.0, 1.0), ("float64", (4,), "sum", 1.0, 1.0),
             ("float64", (2, 2), "sum", 1.0, 1.0), ("float64", (2, 2), "max", 1.0, 1.0),
             ("float64", (2, 2), "sum", 0.5, 1.0), ("float64", (2, 2), "sum", 0.5, 3.0),
             ("float32", (4,), "sum", 1.0, 1.0)]
    for step, (dtype, shape, op, pre, post) in enumerate(calls):
        seed = ("changes", step)
        x = rank_input(dtype, shape, rank, op, seed)
        got = hvd.synchronize(hvd.allreduce_async(x, name="arrays.changing", op=OPS[op], prescale_factor=pre,
                                                  postscale_factor=post))
        assert got.dtype == x.dtype and got.shape == shape, (step, got.dtype, got.shape)
        check_close("arrays.changing", got, reference(dtype, shape, op, size, seed, pre, post), dtype,
                    f"call {step}")
    # Another process set under the same name (every rank adds it; only its members reduce).
    members = [0, size - 1] if size > 2 else [size - 1]
    subset = hvd.add_process_set(members)
    for step in range(2):
        x = rank_input("float32", (3,), rank, "sum", ("set", step))
        if rank in members:
            got = hvd.allreduce(x, name="arrays.changing", op=hvd.Sum, process_set=subset)
            inputs = [rank_input("float32", (3,), r, "sum", ("set", step)) for r in members]
            check_close("arrays.changing (set)", got, reduce_reference(inputs, "sum"), "float32", f"step {step}")
        got = hvd.allreduce(x, name="arrays.changing", op=hvd.Sum)
        check_close("arrays.changing", got, reference("float32", (3,), "sum", size, ("set", step)), "float32", "")
    hvd.remove_process_set(subset)


def test_process_set_asked_for_by_its_members_only():
    """A set that only its members ask for (torch.distributed's new_group calls the backend on members alone): the
    other ranks apply it without asking, keep reducing on the global set meanwhile, and asking again gives the
    same set."""
    from hvdlite.process_sets import add_process_set_of_members
    rank, size = hvd.rank(), hvd.size()
    members = [size - 1, 0]  # any order
    if rank in members:
        subset = add_process_set_of_members(members)
        assert subset.ranks == sorted(members) and subset.rank() == sorted(members).index(rank), subset
        assert add_process_set_of_members(members).process_set_id == subset.process_set_id
        x = rank_input("float64", (4,), rank, "sum", "members")
        got = hvd.allreduce(x, name="members.only", op=hvd.Sum, process_set=subset)
        want = reduce_reference([rank_input("float64", (4,), r, "sum", "members") for r in sorted(members)], "sum")
        check_close("members.only", got, want, "float64", "")
    x = rank_input("float32", (3,), rank, "sum", "after members")
    got = hvd.allreduce(x, name="after.members", op=hvd.Sum)
    check_close("after.members", got, reference("float32", (3,), "sum", size, "after members"), "float32", "")
    # A non-member may not ask for it this way: a clear error at once, no negotiation.
    if rank not in members:
        assert_raises(ValueError, add_process_set_of_members, members, match=("not one of them",))
    hvd.barrier()


def test_arguments():
    rank, size = hvd.rank(), hvd.size()
    # allreduce and allreduce_async are C functions with Horovod's signature: every way of passing the
    # arguments binds them as a Python function would, op defaults to Average, and average is Horovod's.
    for function in (hvd.allreduce, hvd.allreduce_async):
        params = inspect.signature(function).parameters
        assert list(params) == ["tensor", "average", "name", "op", "prescale_factor", "postscale_factor",
                                "process_set"], params
        assert [p.default for p in list(params.values())[1:]] == [None, None, None, 1.0, 1.0, None], params
    x = rank_input("float64", (2, 3), rank, "sum", "arguments")

    def expect(label, got, op, pre=1.0, post=1.0):
        got = hvd.synchronize(got) if isinstance(got, int) else got
        check_close(f"arrays.arguments ({label})", got, reference("float64", (2, 3), op, size, "arguments", pre, post),
                    "float64", label)

    name = "arrays.arguments"
    expect("default op", hvd.allreduce(x, name=name), "average")
    expect("positional", hvd.allreduce_async(x, None, name, hvd.Max, 2.0, 0.5, hvd.global_process_set), "max",
           2.0, 0.5)
    expect("keywords", hvd.allreduce(postscale_factor=3.0, op=hvd.Sum, tensor=x, name=name), "sum", 1.0, 3.0)
    expect("keywords built at run time", hvd.allreduce(x, **{"".join(["na", "me"]): name, "op": hvd.Min}), "min")
    expect("process_set None", hvd.allreduce_async(x, name=name, op=hvd.Sum, process_set=None), "sum")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expect("average=False", hvd.allreduce(x, average=False, name=name), "sum")
        expect("average=True", hvd.allreduce_async(x, True, name), "average")
    assert [w.category for w in caught] == [DeprecationWarning] * 2, caught
    assert all(w.filename == __file__ for w in caught), [w.filename for w in caught]  # points at the caller
    for function, label in ((hvd.allreduce, "allreduce"), (hvd.allreduce_async, "allreduce_async")):
        assert_raises(TypeError, function, match=[f"{label}()", "'tensor'"])
        assert_raises(TypeError, function, x, match=[f"{label}()", "unexpected keyword argument 'bogus'"], bogus=1)
        assert_raises(TypeError, function, x, None, name, match=[f"{label}()", "multiple values for argument 'name'"], name=name)
        assert_raises(TypeError, function, x, match=[f"{label}()", "multiple values for argument 'tensor'"], tensor=x)
        assert_raises(TypeError, function, x, None, name, 1, 1.0, 1.0, None, 0, match=[f"{label}()", "8 were given"])
        assert_raises(ValueError, function, x, match=["unknown reduce op 9"], name=name, op=9)
    assert not ops.pending_handles(), f"{ops.pending_handles()} int handles left"


def test_int_handles():
    rank, size = hvd.rank(), hvd.size()
    xs = [rank_input("float32", (100 + i,), rank, "sum", ("handles", i)) for i in range(40)]
    handles = [hvd.allreduce_async(x, name=f"arrays.handle.{i}", op=hvd.Sum) for i, x in enumerate(xs)]
    assert len(set(handles)) == len(handles) and all(isinstance(h, int) for h in handles), handles
    for i in reversed(range(len(xs))):  # in any order
        got = hvd.synchronize(handles[i])
        check_close(f"arrays.handle.{i}", got, reference("float32", (100 + i,), "sum", size, ("handles", i)),
                    "float32", "")
        assert_raises(KeyError, lambda: hvd.synchronize(handles[i]), match=[str(handles[i])])
    # The next handle takes the slot synchronize freed (int_handles.c); the old id stays unknown, to both calls.
    stale, fresh = handles[0], hvd.allreduce_async(xs[0], name="arrays.handle.0", op=hvd.Sum)
    assert fresh != stale and ops.pending_handles() == 1, (stale, fresh, ops.pending_handles())
    assert_raises(KeyError, lambda: hvd.synchronize(stale), match=[str(stale)])
    assert_raises(KeyError, lambda: hvd.poll(stale), match=[str(stale)])
    check_close("arrays.handle.0", hvd.synchronize(fresh), reference("float32", (100,), "sum", size, ("handles", 0)),
                "float32", "through a reused slot")
    for bogus in ("1", -1, 2 ** 70, 1.5, None):
        assert_raises(KeyError, lambda: hvd.synchronize(bogus), match=[])
    # More handles pending at once than the table's first size (256): it grows, and every id stays its own.
    pending = [hvd.allreduce_async(np.full(3, i, np.float32), name=f"arrays.many.{i}", op=hvd.Sum) for i in range(600)]
    assert len(set(pending)) == 600 and ops.pending_handles() == 600, ops.pending_handles()
    for i in reversed(range(600)):
        got = hvd.synchronize(pending[i])
        check_close(f"arrays.many.{i}", got, np.full(3, float(i * size)), "float32", "600 pending")
    handle = hvd.allreduce_async(xs[0], name="arrays.polled", op=hvd.Sum)
    while not hvd.poll(handle):
        pass
    hvd.synchronize(handle)
    assert_raises(KeyError, lambda: hvd.poll(handle), match=[])
    # Each result is a new array: a later call with the same name leaves an earlier result alone.
    first = hvd.allreduce(xs[0], name="arrays.fresh", op=hvd.Sum)
    kept = first.copy()
    second = hvd.allreduce(xs[0] * 2, name="arrays.fresh", op=hvd.Sum)
    assert second is not first and np.array_equal(first, kept), "an earlier result was overwritten"
    assert not ops.pending_handles(), f"{ops.pending_handles()} int handles left"


def test_errors_on_every_rank():
    rank, size = hvd.rank(), hvd.size()
    # Shapes that disagree across ranks: every rank raises, naming the tensor and the shapes; the name works again.
    for step in range(2):
        x = np.ones(4 + (rank == size - 1), np.float32)
        assert_raises(hvd.HvdliteError, lambda: hvd.synchronize(hvd.allreduce_async(x, name="arrays.mismatch", op=hvd.Sum)), match=["arrays.mismatch", "shape"])
    got = hvd.allreduce(np.ones(4, np.float32), name="arrays.mismatch", op=hvd.Sum)
    check_close("arrays.mismatch", got, np.full(4, float(size)), "float32", "after the error")
    # Dtypes the core does not carry: TypeError naming the tensor, before anything is sent.
    for dtype in (np.uint32, np.complex64):
        assert_raises(TypeError, lambda: hvd.allreduce_async(np.ones(3, dtype), name="arrays.unsupported"), match=["arrays.unsupported", "dtype"])
    assert_raises(ValueError, lambda: hvd.allreduce(np.ones(3), name="arrays.badop", op=17), match=["op"])
    assert_raises(ValueError, lambda: hvd.allreduce(np.ones(3), op=hvd.Sum, average=True), match=["supersedes"])
    assert not ops.pending_handles(), f"{ops.pending_handles()} int handles left"


def test_groups():
    rank, size = hvd.rank(), hvd.size()
    # A named group reused, then with one member of another shape, dtype or layout: each call right.
    def members(step, shapes, dtype="float32"):
        return [rank_input(dtype, s, rank, "sum", ("group", step, i)) for i, s in enumerate(shapes)]

    def expected(step, shapes, dtype="float32"):
        return [reference(dtype, s, "sum", size, ("group", step, i)) for i, s in enumerate(shapes)]

    steps = [((5,), (2, 3), (7,)), ((5,), (2, 3), (7,)), ((5,), (3, 2), (7,)), ((5,), (3, 2))]
    for step, shapes in enumerate(steps):
        got = hvd.grouped_allreduce(members(step, shapes), name="arrays.group", op=hvd.Sum)
        assert len(got) == len(shapes)
        for g, e, s in zip(got, expected(step, shapes), shapes):
            assert g.shape == s
            check_close("arrays.group", g, e, "float32", f"step {step}")
    arrays = members(9, ((4, 6), (8,)))
    arrays[0] = arrays[0][:, ::2]  # strided: made contiguous in Python
    got = hvd.grouped_allreduce(arrays, name="arrays.group", op=hvd.Sum)
    want = expected(9, ((4, 6), (8,)))
    check_close("arrays.group", got[0], want[0][:, ::2], "float32", "strided member")
    check_close("arrays.group", got[1], want[1], "float32", "strided member")
    # A generator of members, for a name already prepared: read once, right.
    got = hvd.grouped_allreduce((a for a in members(11, ((5,), (3, 2)))), name="arrays.group", op=hvd.Sum)
    for g, e in zip(got, expected(11, ((5,), (3, 2)))):
        check_close("arrays.group", g, e, "float32", "members from a generator")
    got = hvd.grouped_allreduce(members(10, ((3,),), "float64"), name="arrays.group", op=hvd.Max)
    check_close("arrays.group", got[0], reference("float64", (3,), "max", size, ("group", 10, 0)), "float64",
                "a max of float64")


def test_recycled_outputs():
    rank, size = hvd.rank(), hvd.size()
    # An output nobody holds any more serves a later call of its name; one that is held, viewed, watched or
    # changed in place never does. Every result right, and every result still held unchanged by later calls.
    def step_input(step, shape=(2, 3), dtype="float64"):
        return rank_input(dtype, shape, rank, "sum", ("recycle", step))

    def step_expected(step, shape=(2, 3), dtype="float64"):
        return reference(dtype, shape, "sum", size, ("recycle", step))

    name = "arrays.recycled"
    held = []  # (result still referenced, a copy of what it was)
    first = hvd.allreduce(step_input(0), name=name, op=hvd.Sum)
    first_id = id(first)  # while its slot keeps it alive, no other object can have this id
    del first
    for step in range(1, 9):
        result = (hvd.allreduce(step_input(step), name=name, op=hvd.Sum) if step % 2 else
                  hvd.synchronize(hvd.allreduce_async(step_input(step), name=name, op=hvd.Sum)))
        check_close(name, result, step_expected(step), "float64", f"step {step}")
        if step == 1:
            assert id(result) == first_id, "a dropped output was not recycled"
        if step in (2, 5):
            held.append((result, result.copy()))  # held: later calls must leave it alone
        if step == 3:
            held.append((result[1:], result[1:].copy()))  # a view holds its base
        if step == 4:
            watched = weakref.ref(result)
        if step == 6:
            result.shape = (3, 2)  # changed in place, then dropped: not handed out as a (2, 3) output
        if step == 7:
            result.flags.writeable = False
        del result
        for kept, copy in held:
            assert np.array_equal(kept, copy), f"step {step}: a result still held was overwritten"
    # Watched outputs are not recycled, so the watched one died when a new output took its slot.
    assert watched() is None, "a weakly referenced output is still kept"
    # Holding each result until the next call returns (a loop's `avg = hvd.allreduce(...)`): still recycled.
    ids = set()
    avg = None
    for step in range(10, 16):
        avg = hvd.allreduce(step_input(step), name=name + ".loop", op=hvd.Sum)
        check_close(name, avg, step_expected(step), "float64", f"step {step}")
        ids.add(id(avg))
    assert len(ids) == 2, f"{len(ids)} output arrays for 6 calls that each held one result"
    # Groups: a dropped list's outputs serve the next call; an output taken out of it is left alone.
    members = [step_input(20, (4,)), step_input(21, (2, 2))]
    outs = hvd.grouped_allreduce(members, name=name + ".group", op=hvd.Sum)
    out_ids = [id(o) for o in outs]
    kept = outs[1]
    del outs
    outs = hvd.grouped_allreduce([m * 2 for m in members], name=name + ".group", op=hvd.Sum)
    assert id(outs[0]) == out_ids[0] and outs[1] is not kept, "group outputs not recycled as they should be"
    check_close(name, kept, step_expected(21, (2, 2)), "float64", "group member held")
    check_close(name, outs[0], 2 * step_expected(20, (4,)), "float64", "group, recycled member")
    check_close(name, outs[1], 2 * step_expected(21, (2, 2)), "float64", "group, new member")


def test_output_arena():
    rank, size = hvd.rank(), hvd.size()
    # New recycled outputs come from native/python/output_arena.c: packed end to end, 64-byte aligned, in 2 MiB
    # chunks; bigger ones on their own. Results right whatever their memory, resizable like any array, and the
    # chunks given back as their outputs die.
    def run(count, shape, tag, step):
        inputs = [rank_input("float32", shape, rank, "sum", (tag, i, step)) for i in range(count)]
        handles = [hvd.allreduce_async(x, name=f"arrays.arena.{tag}.{i}", op=hvd.Sum) for i, x in enumerate(inputs)]
        outs = [hvd.synchronize(h) for h in handles]
        for i, out in enumerate(outs):
            check_close(tag, out, reference("float32", shape, "sum", size, (tag, i, step)), "float32", f"output {i}")
        return outs

    outs = run(8, (1000,), "packed", 0)  # 4000 bytes each: 4032 with the header, rounded to 64
    addresses = [o.ctypes.data for o in outs]
    assert all(a % 64 == 0 for a in addresses), f"outputs not 64-byte aligned: {[a % 64 for a in addresses]}"
    steps = {b - a for a, b in zip(addresses, addresses[1:])}
    assert steps == {4032 + 64}, f"outputs made one after another are not packed end to end: steps {steps}"
    assert all(o.flags.owndata for o in outs), "arena outputs must own their data (recycling needs it)"

    big = run(2, (300_000,), "own", 0)  # 1.2 MB each: over a quarter of a chunk, their own memory
    big[0].resize((600_000,), refcheck=False)  # realloc: the old contents kept, the rest zeros
    want = reference("float32", (300_000,), "sum", size, ("own", 0, 0))
    check_close("resized", big[0][:300_000], want, "float32", "a resized output keeps its values")
    outs[3].resize((2000,), refcheck=False)  # an output inside a chunk, moved to a bigger place
    check_close("resized", outs[3][:1000], reference("float32", (1000,), "sum", size, ("packed", 3, 0)), "float32",
                "a resized packed output keeps its values")
    del outs, big

    # Names whose shapes change every call drop their old outputs: the chunks mapped stop growing with steps, and
    # stay within what the kept outputs need (48 names, each keeping at most two of up to 96 KB) and two chunks.
    mapped = []
    for step in range(90):
        for _ in run(16, (20_000 + 1000 * (step % 5),), f"churn{step % 3}", step):
            pass
        if step in (29, 89):
            mapped.append(hvd.ops._tensor_calls.output_arena_bytes())
    assert mapped[1] <= mapped[0], f"output chunks grow with steps: {mapped[0]} then {mapped[1]} bytes"
    assert mapped[1] <= 48 * 2 * 96_064 + 2 * (2 << 20), f"{mapped[1]} bytes of output chunks"


def test_names_in_any_order_shape_or_string_object():
    rank, size = hvd.rank(), hvd.size()
    # The C path finds each name's prepared entry by name: steps in one order, in reverse, with one name's shape
    # changed midway, with names rebuilt as new strings, and after every prepared entry is dropped must each
    # reduce every tensor right.
    names = [f"arrays.order.{i}" for i in range(6)]
    shapes = {name: (5 + i,) for i, name in enumerate(names)}

    def step(label, order, shape_of=shapes.get, name_of=lambda n: n):
        seeds = {n: ("order", label, n) for n in order}
        handles = [hvd.allreduce_async(rank_input("float32", shape_of(n), rank, "sum", seeds[n]), name=name_of(n),
                                       op=hvd.Sum) for n in order]
        for n, handle in zip(order, handles):
            check_close(n, hvd.synchronize(handle), reference("float32", shape_of(n), "sum", size, seeds[n]),
                        "float32", label)

    for s in range(3):
        step(f"in order {s}", names)
    for s in range(2):
        step(f"reversed {s}", names[::-1])
    changed = dict(shapes, **{names[2]: (3, 2)})
    step("one shape changed", names, changed.get)
    step("shape back", names)
    step("names rebuilt", names, name_of=lambda n: "".join(list(n)))  # equal strings, other objects
    ops._PREPARED_REQUESTS.clear()
    step("after the entries were dropped", names)
    step("prepared again", names)


def test_no_leaks():
    rank, size = hvd.rank(), hvd.size()
    # The C path holds the input and the output until the handle is released, then lets both go (but for the
    # one reference of the slot that recycles it).
    x = rank_input("float32", (64,), rank, "sum", "leaks")
    before = sys.getrefcount(x)
    for _ in range(200):
        out = hvd.synchronize(hvd.allreduce_async(x, name="arrays.leaks", op=hvd.Sum))
        hvd.allreduce(x, name="arrays.leaks.sync", op=hvd.Sum)
    assert sys.getrefcount(x) == before, f"input references {before} -> {sys.getrefcount(x)}"
    assert sys.getrefcount(out) == 3, f"the result is held elsewhere ({sys.getrefcount(out) - 3} references)"
    kept = ops._PREPARED_REQUESTS["arrays.leaks"].outputs
    assert len(kept) == 2 and any(o is out for o in kept), "the last result is not among the outputs kept to recycle"
    group = [x, x + 1]
    refs = [sys.getrefcount(a) for a in group]
    for _ in range(100):
        outs = hvd.grouped_allreduce(group, name="arrays.leaks.group", op=hvd.Sum)
    assert [sys.getrefcount(a) for a in group] == refs, "group inputs leaked"
    fresh = [np.ones(1), np.ones(1)]  # how many references a list's items have when nothing else holds them
    assert [sys.getrefcount(o) - 1 for o in outs] == [sys.getrefcount(o) for o in fresh], "group outputs held"
    assert sys.getrefcount(outs) == sys.getrefcount(fresh), "the list of group outputs is held elsewhere"


def test_after_shutdown():
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    x = np.ones(4, np.float32)
    # Prepared names run from C; they must still say that hvdlite is not running.
    for call in (lambda: hvd.allreduce(x, name="arrays.leaks.sync", op=hvd.Sum),
                 lambda: hvd.allreduce_async(x, name="arrays.leaks", op=hvd.Sum),
                 lambda: hvd.grouped_allreduce_async([x, x + 1], name="arrays.leaks.group", op=hvd.Sum)):
        assert_raises(ValueError, call, match=["not been initialized"])
