"""Negotiation rounds carried in all-reduces (HVDLITE_CARRIED_ROUNDS, native/src/negotiation/carried_round.h): while a step's
tensors keep coming, a round rides in the last all-reduce of the round before it, so it exchanges nothing of its
own. Rank 0's timeline names such a tensor's negotiation NEGOTIATE_CARRIED. Every result on every rank equals a
float64 reference, a request that no longer matches its cached agreement is an error on every rank while carrying,
and where carrying is off (auto on one host) no round rides. At 2, 3 and 4 ranks, and across simulated hosts (where auto carries).
"""
import json
import os
import tempfile
import time

import numpy as np
import pytest
from mpi4py import MPI

import hvdlite as hvd
from harness.reference import check_close, rank_input, reduce_reference

# Overlap on: a rank whose cores are few (as here) otherwise holds async work until every rank waits, and a step's
# tensors then go in one round, where nothing is left to ride.
pytestmark = [pytest.mark.ranks(2, 3, 4), pytest.mark.across_hosts, pytest.mark.hvd_env(HVDLITE_OVERLAP="on")]

# A step like a backward pass: two large gradients first (two batches: the second carries the next round, which
# auto does from 256 KiB), whose all-reduces run while the others arrive; float32 and float64, sum and average, with
# min, max and product too (each carries the round's bits its own way).
GRADIENTS = [("lead", "float32", 2_000_000, "sum"), ("lead64", "float64", 1_000_000, "average")] + [
    (f"g{i}", dtype, count, op) for i, (dtype, count, op) in enumerate([
        ("float32", 20_000, "average"), ("float64", 3_000, "sum"), ("float32", 150_000, "min"),
        ("float32", 700, "max"), ("float64", 40_000, "product"), ("int32", 9_000, "sum"), ("float32", 90_000, "sum"),
        ("bfloat16", 5_000, "average"), ("float32", 250_000, "sum"), ("float64", 12, "max")])]
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
STEPS = 8


def hosts():
    return MPI.COMM_WORLD.allreduce(1 if hvd.local_rank() == 0 else 0)


def run_step(step, shapes=None):
    rank, size = hvd.rank(), hvd.size()
    inputs = [rank_input(dtype, (shapes or {}).get(name, (count,)), rank, op, seed=(name, step))
              for name, dtype, count, op in GRADIENTS]  # made first: submissions follow each other closely
    # The ranks start the step together, as a training step's all-reduces keep them: the references of the step
    # before take each rank a different time, and the slowest one's submissions otherwise decided alone whether its
    # rest came in the leads' round (nothing then rides) or after it.
    MPI.COMM_WORLD.Barrier()
    handles = []
    for i, ((name, _, _, op), tensor) in enumerate(zip(GRADIENTS, inputs)):
        handles.append(hvd.allreduce_async(tensor, name=name, op=OPS[op]))
        if i == 1:
            time.sleep(0.002)  # the leads' round starts without the rest, which arrive while it reduces
    for (name, dtype, count, op), handle in zip(GRADIENTS, handles):
        want = reduce_reference([rank_input(dtype, (count,), r, op, seed=(name, step)) for r in range(size)], op)
        check_close(name, np.asarray(hvd.synchronize(handle)), want, dtype, f"step {step}, rank {rank}:")


def negotiations(trace):
    """How many tensor negotiations rank 0's timeline shows, carried and not."""
    with open(trace) as f:
        names = [e["name"] for e in json.load(f) if e.get("ph") == "X"]
    return names.count("NEGOTIATE_CARRIED"), names.count("NEGOTIATE")


@pytest.mark.parametrize("mode", [
    pytest.param(mode, marks=pytest.mark.hvd_env(HVDLITE_CARRIED_ROUNDS=mode), id=mode) for mode in ("on", "auto")])
def test_rounds_ride_in_all_reduces_while_a_step_keeps_tensors_coming(mode):
    hvd.init()
    directory = MPI.COMM_WORLD.bcast(tempfile.mkdtemp() if hvd.rank() == 0 else None)
    trace = os.path.join(directory, "trace.json")
    hvd.start_timeline(trace)
    for step in range(STEPS):
        run_step(step)
    hvd.stop_timeline()
    carried, separate = negotiations(trace) if hvd.rank() == 0 else (None, None)
    rank, across_hosts = hvd.rank(), hosts() > 1
    hvd.shutdown()
    if rank == 0:
        assert carried + separate >= STEPS * len(GRADIENTS), (carried, separate)
        if mode == "on" or (mode == "auto" and across_hosts):
            assert carried > 0, (carried, separate)
        else:
            assert carried == 0, (carried, separate)


@pytest.mark.sanitize(address=True, thread=True)
@pytest.mark.hvd_env(HVDLITE_CARRIED_ROUNDS="on")
def test_a_request_that_changes_while_rounds_ride_fails_on_every_rank_and_training_goes_on():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(4):
        run_step(step)
    # One rank's gradient changes shape: its cached agreement no longer holds; the round that carries this shows
    # it on every rank, and the coordinator names the tensor and what each rank sent.
    changed = "g6"
    count = dict((name, count) for name, _, count, _ in GRADIENTS)[changed]
    shapes = {changed: (count // 2, 2) if rank == size - 1 else (count,)}
    handles = [(name, hvd.allreduce_async(rank_input(dtype, shapes.get(name, (count,)), rank, op, seed=(name, 4)),
                                          name=name, op=OPS[op])) for name, dtype, count, op in GRADIENTS]
    for name, handle in handles:
        if name != changed:
            hvd.synchronize(handle)
            continue
        with pytest.raises(hvd.HvdliteError) as failure:
            hvd.synchronize(handle)
        message = str(failure.value)
        assert f"'{changed}'" in message and "shape" in message.lower(), message
    MPI.COMM_WORLD.Barrier()
    for step in range(5, 8):
        run_step(step)
    hvd.shutdown()
