"""hvdlite.ray.RayExecutor on a real Ray (a local head started here, its raylet and worker processes): the ranks run
as children of the executor's actors and stay up between calls; run / run_remote / execute / execute_single give
values by rank; a raising rank and an actor killed while its rank runs make the call raise promptly and end the
ranks; shutdown leaves no rank or proxy behind, and the executor starts again."""
import os
import shutil
import sys
import tempfile
import threading
import time

import cloudpickle
import numpy as np
import pytest
import ray

import elastic_training
from harness import process_tree
from harness.process_tree import ancestors
from harness.elastic_folders import commit_folders_here
from hvdlite.ray import RankFailed, RayExecutor, SlotLost

KILL_TO_RAISE_LIMIT = 30.0  # seconds from a killed actor to the call raising
# The ranks cannot import these modules: the functions they run go by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(process_tree)
cloudpickle.register_pickle_by_value(elastic_training)


@pytest.fixture(scope="module")
def ray_head():
    sessions = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", _temp_dir=sessions)
    yield
    ray.shutdown()
    shutil.rmtree(sessions, ignore_errors=True)


@pytest.fixture
def executor(ray_head, job_token):
    started = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2, cpus_per_worker=1)
    yield started
    started.shutdown()


class Counter:
    """An executable_cls: its instance lives in the rank between calls."""

    def __init__(self, start):
        self.value = start

    def bump(self):
        import hvdlite as hvd
        hvd.init()
        self.value += 1 + hvd.rank()
        return self.value


def test_the_ranks_live_in_the_actors_and_answer_every_kind_of_call(executor):
    def step(scale, *, offset):
        import hvdlite as hvd
        hvd.init()
        x = np.arange(4, dtype=np.float64) * (hvd.rank() + 1) * scale + offset
        return {"rank": hvd.rank(), "size": hvd.size(), "total": hvd.allreduce(x, name="x", op=hvd.Sum),
                "pid": os.getpid(), "ancestors": ancestors()}

    executor.start(executable_cls=Counter, executable_args=[10])
    first = executor.run(step, args=[0.5], kwargs={"offset": 1.0})
    expected = sum(np.arange(4, dtype=np.float64) * (rank + 1) * 0.5 + 1.0 for rank in range(2))
    assert [(r["rank"], r["size"]) for r in first] == [(0, 2), (1, 2)]
    for result in first:
        np.testing.assert_array_equal(result["total"], expected)
        assert "hydra_pmi_proxy" in result["ancestors"][0]
        assert any("_SlotActor" in line for line in result["ancestors"][1:]), result["ancestors"]
    second = ray.get(executor.run_remote(step, args=[1.0], kwargs={"offset": 0.0}))
    assert [r["pid"] for r in second] == [r["pid"] for r in first]  # the same ranks, kept between calls
    assert executor.execute(lambda counter: counter.bump()) == [11, 12]
    assert executor.execute(lambda counter: counter.bump()) == [12, 14]
    assert executor.execute_single(lambda counter: counter.value) == 12


def test_workers_per_host(ray_head, job_token):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=1, num_workers_per_host=2)
    executor.start()
    try:
        assert executor.run(lambda: __import__("hvdlite").init() or __import__("hvdlite").local_rank()) == [0, 1]
    finally:
        executor.shutdown()


def test_a_raising_rank_fails_the_call_with_its_traceback_and_ends_the_ranks(executor):
    def fails_on_one():
        import hvdlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank 1 cannot go on")
        hvd.allreduce(np.zeros(1), name="never_completes")

    executor.start()
    started = time.monotonic()
    with pytest.raises(RankFailed, match=r"(?s)rank 1.*ValueError: rank 1 cannot go on"):
        executor.run(fails_on_one)
    assert time.monotonic() - started < 60
    deadline = time.monotonic() + 30
    while executor._job.running() and time.monotonic() < deadline:
        time.sleep(0.1)  # the job's end is what the next call looks at
    with pytest.raises(RuntimeError, match="has ended"):
        executor.run(lambda: None)
    executor.shutdown()
    executor.start()
    assert executor.run(lambda: "usable again") == ["usable again"] * 2


def test_an_actor_killed_while_its_rank_runs_fails_the_call_promptly(executor):
    executor.start()
    killed = {}

    def kill_actor_one():
        time.sleep(3)  # both ranks are in their sleep by now
        killed["at"] = time.monotonic()
        ray.kill(executor._actors[1])
    threading.Thread(target=kill_actor_one, daemon=True).start()
    with pytest.raises(SlotLost, match="lost the actor of (slot-1|rank 1)"):
        executor.run(lambda: time.sleep(600))
    kill_to_raise = time.monotonic() - killed["at"]
    print(f"from the killed actor to run() raising: {kill_to_raise:.2f} s")
    assert kill_to_raise < KILL_TO_RAISE_LIMIT
    executor.shutdown()
    executor.start()
    assert executor.run(lambda: "usable again") == ["usable again"] * 2


@pytest.mark.long  # make check: the same machinery is tested on Spark in make test
def test_an_elastic_executor_resumes_after_a_killed_actor_with_the_parameters_of_an_uninterrupted_run(ray_head,
                                                                                                      job_token,
                                                                                                      capfd):
    settings = RayExecutor.create_settings(timeout_s=60)
    before = commit_folders_here()
    reference = RayExecutor(settings, num_workers=2, cpus_per_worker=1)
    reference.start()
    try:
        uninterrupted = reference.run(elastic_training.train)
    finally:
        reference.shutdown()
    executor = RayExecutor(settings, min_workers=2, max_workers=2, reset_limit=2)
    executor.start()
    try:
        resumed = executor.run(elastic_training.train, kwargs={"kill_after_steps": 5, "slot_word": "_SlotActor"})
        with pytest.raises(ValueError, match="run_remote is not offered by an elastic RayExecutor"):
            executor.run_remote(lambda: None)
    finally:
        executor.shutdown()
    assert "hvdlite.ray: restart 1 on 2 slots: the job ended: lost slot-" in capfd.readouterr().err
    assert [r["restarts"] for r in resumed] == [1, 1]
    assert all(0 < r["resumed_at"] <= 5 and r["size"] == 2 for r in resumed), resumed
    for rank in range(2):
        for got, want in zip(resumed[rank]["parameters"], uninterrupted[rank]["parameters"]):
            np.testing.assert_array_equal(got, want)  # bitwise
    assert commit_folders_here() == before  # the ranks removed the commits at the end
    deadline = time.monotonic() + 30  # Ray frees a removed placement group's resources in the background
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU") == 2  # every actor and placement group given back


@pytest.mark.long
def test_an_elastic_executor_gives_up_at_its_reset_limit_and_removes_the_commits(ray_head, job_token, capfd):
    before = commit_folders_here()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=2, reset_limit=0)
    executor.start()
    try:
        with pytest.raises(SlotLost, match=r"lost slot-\d"):
            executor.run(elastic_training.train, kwargs={"kill_after_steps": 2, "slot_word": "_SlotActor"})
    finally:
        executor.shutdown()
    assert "the job failed after 0 restarts, the reset limit" in capfd.readouterr().err
    assert commit_folders_here() == before
