"""All-reduces that repeat round after round, so the eager path (native/src/negotiation/eager_allreduce.h) carries
them inside the negotiation round, checked on every rank against float64 references; with missed
predictions (a late rank), a reshaped tensor, a joined rank and a process set; under three settings, and the
timeline shows how many rounds went eager under each.
"""
import json
import os
import time

import numpy as np
import pytest

import hvdlite as hvd
from harness.numpy_groups import same_bytes_everywhere
from harness.reference import DTYPES, check_close, rank_input, reduce_reference
from hvdlite.testing.simulated_hosts import job_layout

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
REPEATS = 6
# What the timeline must show: "most" predictable rounds went eager, "some" did, or "none".
SETTINGS = {
    "eager": ("most", {}),
    # Evictions reassign planned bits; a 64-byte payload fits only the smallest tensors' rounds.
    "tiny cache and payload": ("some", dict(HVDLITE_CACHE_CAPACITY=4, HVDLITE_EAGER_MAX_BYTES=64)),
    "eager off": ("none", dict(HVDLITE_EAGER_MAX_BYTES=0)),
}
pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_TIMELINE="{shared}/trace.json", HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),
              pytest.mark.across_hosts, pytest.mark.openmpi, pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True,
                params=[pytest.param(name, marks=pytest.mark.hvd_env(**env), id=name)
                        for name, (_, env) in SETTINGS.items()])
def setting(request):
    hvd.init()
    return request.param


def test_repeated():
    rank, size = hvd.rank(), hvd.size()
    # One name, synchronous, again and again: from the third round on it is predicted and rides along.
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            for n in (1, 13, 1000):
                floating = dtype.startswith("float") or dtype == "bfloat16"
                scales = (0.5, 3.0) if floating and n == 13 and op_name == "sum" else (1.0, 1.0)
                name = f"eager.{dtype}.{op_name}.{n}"
                for step in range(REPEATS):
                    x = rank_input(dtype, (n,), rank, op_name, (name, step))
                    got = hvd.allreduce(x, name=name, op=op, prescale_factor=scales[0], postscale_factor=scales[1])
                    inputs = [rank_input(dtype, (n,), r, op_name, (name, step)) for r in range(size)]
                    check_close(name, got, reduce_reference(inputs, op_name, *scales), dtype, f"step {step}")
                same_bytes_everywhere(got, name)


def run_burst(rank, size, shapes, grouped=False):
    dtypes = {name: "int32" if name.endswith(".d") else "float32" for name in shapes}
    for step in range(8):
        inputs = {name: [rank_input(dtypes[name], shape, r, "sum", (name, step)) for r in range(size)]
                  for name, shape in shapes.items()}
        if grouped:  # one submission: every rank's tensors are ready in the same round
            prefix = os.path.commonprefix(list(shapes)).rstrip(".")
            results = hvd.grouped_allreduce([inputs[name][rank] for name in shapes], name=prefix, op=hvd.Sum)
        else:
            handles = [hvd.allreduce_async(inputs[name][rank], name=name, op=hvd.Sum) for name in shapes]
            results = [hvd.synchronize(handle) for handle in handles]
        for (name, shape), got in zip(shapes.items(), results):
            assert got.shape == shape
            check_close(name, got, reduce_reference(inputs[name], "sum"), dtypes[name], f"burst step {step}")


def test_burst():
    rank, size = hvd.rank(), hvd.size()
    # Several tensors per round that fit the payload together: they share it, each at its offset.
    run_burst(rank, size, {"burst.a": (10,), "burst.b": (3, 100), "burst.c": (3000,), "burst.d": (7,)})
    # One of them too big for the payload: that round runs a fused all-reduce anyway, and all of them join it.
    # Grouped, so no round sees only the small ones ready (separate submissions may straddle two rounds, and
    # a round of small ones alone rightly rides eager).
    run_burst(rank, size, {"big.a": (10,), "big.b": (3, 100), "big.c": (3000,), "big.big": (20000,), "big.d": (7,)},
              grouped=True)


def test_repeated_32_kib():
    # Eager on one host; across hosts the payload is at most 16 KiB, so this goes the normal way (the timeline
    # test below tells which).
    rank, size = hvd.rank(), hvd.size()
    for step in range(REPEATS):
        x = rank_input("float32", (8192,), rank, "sum", ("mid", step))
        got = hvd.allreduce(x, name="mid.32k", op=hvd.Sum)
        inputs = [rank_input("float32", (8192,), r, "sum", ("mid", step)) for r in range(size)]
        check_close("mid.32k", got, reduce_reference(inputs, "sum"), "float32", f"step {step}")


def test_late_rank():
    rank, size = hvd.rank(), hvd.size()
    # The last rank is late now and then: the others' rounds predict the tensor but it is not ready
    # everywhere, so those rounds discard the payload and the tensor goes the normal way.
    for step in range(24):
        if rank == size - 1 and step % 4 == 2:
            time.sleep(0.005)
        x = np.full(33, float(rank * 100 + step))
        got = hvd.allreduce(x, name="late", op=hvd.Sum)
        expected = sum(r * 100 + step for r in range(size))
        assert np.array_equal(got, np.full(33, float(expected))), (step, got[:3])


def test_reshaped():
    rank, size = hvd.rank(), hvd.size()
    # The same name with a new shape: the cached agreement (and the slot planned for it) is dropped.
    for step in range(10):
        n = 10 if step < 5 else 12
        got = hvd.allreduce(np.arange(n, dtype=np.float64) * (rank + 1), name="reshaped", op=hvd.Sum)
        assert np.array_equal(got, np.arange(n) * sum(range(1, size + 1))), (step, got)


def test_join():
    rank, size = hvd.rank(), hvd.size()
    # The last rank joins early; its eager slots contribute zeros.
    steps = 3 if rank == size - 1 else 9
    for step in range(steps):
        got = hvd.allreduce(np.full(5, float(rank + 1)), name="joined.sum", op=hvd.Sum)
        ranks = range(size) if step < 3 else range(size - 1)
        assert np.array_equal(got, np.full(5, float(sum(r + 1 for r in ranks)))), (step, got)
    assert hvd.join() >= 0


def test_process_set():
    rank, size = hvd.rank(), hvd.size()
    members = [0, 1] if size > 2 else [1]  # with 2 ranks: a set of one, where the round reduces nothing
    ps = hvd.add_process_set(members)
    if ps.included():
        for step in range(REPEATS):
            got = hvd.allreduce(np.full(4, rank + step, dtype=np.float32), name="ps.eager", op=hvd.Sum,
                                process_set=ps)
            expected = sum(r + step for r in members)
            assert np.array_equal(got, np.full(4, expected, dtype=np.float32)), (step, got)
    assert hvd.remove_process_set(ps)


def eager_events(path, prefix=""):
    """How many EAGER_ALLREDUCE events the timeline holds for tensors whose name starts with prefix."""
    with open(path) as f:
        events = json.load(f)
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    return sum(1 for e in events
               if e.get("ph") == "X" and e.get("name") == "EAGER_ALLREDUCE" and rows[e["tid"]].startswith(prefix))


def test_the_timeline_counts_the_eager_rounds(setting):
    rank = hvd.rank()
    hvd.shutdown()  # flushes the timeline (rank 0 writes it)
    if rank != 0:
        return
    path, expect = os.environ["HVDLITE_TIMELINE"], SETTINGS[setting][0]
    count = eager_events(path)
    if expect == "most":
        # test_repeated alone has 9 dtypes x 5 ops x 3 sizes x (REPEATS - 2) predictable rounds.
        assert count >= 9 * 5 * 3 * (REPEATS - 2) // 2, f"only {count} eager all-reduces"
        bursts = eager_events(path, "burst."), eager_events(path, "big.")
        assert bursts[0] > 0 and bursts[1] == 0, f"eager events: fitting burst {bursts[0]}, burst with one too big {bursts[1]}"
        mid = eager_events(path, "mid.")
        if job_layout():
            assert mid == 0, f"{mid} eager all-reduces of 32 KiB across hosts (at most 16 KiB ride there)"
        else:
            assert mid > 0, "no eager all-reduce of 32 KiB on one host"
    elif expect == "some":
        assert count > 0, "no eager all-reduce"
    else:
        assert count == 0, f"{count} eager all-reduces with eager off"
