"""HVDLITE_AUTOTUNE=1: the coordinator tunes fusion threshold and cycle time online and ships them in the
negotiation round, so every rank fuses alike and results stay exact; the trials are logged as CSV.

Training-like traffic: every step all-reduces a set of gradients of mixed sizes and dtypes (async, then
synchronized), long enough for the autotuner to try every candidate and settle; the tuned fusion threshold
changes in the middle of the run on every rank at once."""
import csv
import os

import pytest

import hvdlite as hvd
from harness.reference import check_close, rank_input, reduce_reference

pytestmark = pytest.mark.sanitize(address=True)

# 1.2 MiB of float32 gradients in one tensor: a 1 MiB threshold and a 4 MiB one fuse differently.
GRADIENTS = [("float32", (300, 1024)), ("float32", (4097,)), ("float64", (2000,)), ("float32", (64, 64)),
             ("float16", (999,)), ("float32", (128,)), ("float32", (200, 1500)), ("float64", (3,)),
             ("float32", (70001,)), ("float32", (10,))]


SEEDS = 5  # a few distinct inputs, each with its references computed once: the steps' time is the traffic's


def train(steps):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    inputs, references = {}, {}
    for seed in range(SEEDS):
        for i, (dtype, shape) in enumerate(GRADIENTS):
            inputs[i, seed] = rank_input(dtype, shape, rank, "average", (i, seed))
            references[i, seed] = reduce_reference(
                [rank_input(dtype, shape, r, "average", (i, seed)) for r in range(size)], "average")
    for step in range(steps):
        seed = step % SEEDS
        handles = [hvd.allreduce_async(inputs[i, seed], name=f"grad.{i}", op=hvd.Average)
                   for i in range(len(GRADIENTS))]
        for (i, (dtype, _)), handle in zip(enumerate(GRADIENTS), handles):
            check_close(f"grad.{i} step {step}", hvd.synchronize(handle), references[i, seed], dtype, "allreduce")
    hvd.shutdown()
    return rank


@pytest.mark.ranks(2, 3)
@pytest.mark.timeout(300)
@pytest.mark.hvd_env(HVDLITE_AUTOTUNE=1, HVDLITE_AUTOTUNE_LOG="{shared}/autotune.csv",
                     HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)
def test_autotuned_training_traffic_stays_correct_and_logs_its_trials():
    if train(300) != 0:
        return  # rank 0 writes the log
    with open(os.environ["HVDLITE_AUTOTUNE_LOG"]) as f:
        rows = list(csv.DictReader(f))
    phases = [row["phase"] for row in rows]
    assert phases[:2] == ["warmup", "warmup"] and "fusion" in phases and "cycle" in phases, phases
    assert {int(row["rounds"]) for row in rows if row["phase"] != "settled"} == {20}  # the default sample
    assert phases[-1] == "settled", phases
    tried = {int(row["fusion_threshold_bytes"]) for row in rows if row["phase"] == "fusion"}
    assert len(tried) >= 3, tried
    assert all(float(row["bytes_per_second"]) > 0 for row in rows if row["phase"] != "settled")
    settled = rows[-1]
    best = max((row for row in rows if row["phase"] in ("fusion", "cycle")), key=lambda r: float(r["bytes_per_second"]))
    assert int(settled["fusion_threshold_bytes"]) == int(best["fusion_threshold_bytes"]) or best["phase"] == "cycle"


@pytest.mark.ranks(2)
@pytest.mark.timeout(120)
@pytest.mark.hvd_env(HOROVOD_AUTOTUNE=1, HOROVOD_AUTOTUNE_LOG="{shared}/autotune.csv",
                     HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1, HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE=4)
def test_warmup_samples_and_steps_per_sample_shape_the_trials():
    # 60 steps settle with 4 work rounds a sample (the defaults, 2 warm-up samples of 20 rounds, would still be
    # trying fusion thresholds then).
    if train(60) != 0:
        return
    with open(os.environ["HOROVOD_AUTOTUNE_LOG"]) as f:
        rows = list(csv.DictReader(f))
    phases = [row["phase"] for row in rows]
    assert phases.count("warmup") == 1 and phases[-1] == "settled", phases
    assert {int(row["rounds"]) for row in rows if row["phase"] != "settled"} == {4}, rows


@pytest.mark.ranks(2)
@pytest.mark.hvd_env(HVDLITE_AUTOTUNE=1)
def test_autotune_log_is_optional():
    train(20)
