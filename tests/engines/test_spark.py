"""hvdlite.spark on a real PySpark (local[2]: a JVM and its Python workers, started here): the ranks run inside the
barrier stage's tasks (each rank's process descends from a PySpark worker), values come back in rank order with
args and kwargs; a raising rank, a task killed while its rank runs and a stage that cannot start make ``run``
raise promptly, leave no rank or proxy behind, and leave the SparkContext usable; HorovodRunner on Spark and on
the driver alone; run_elastic resumes after a killed task with the parameters of an uninterrupted run, and gives up
at its reset limit leaving no commits."""
import datetime
import os
import signal
import sys
import time

import cloudpickle
import numpy as np
import pytest

import elastic_training
import hvdlite.spark
from harness import process_tree
from harness.elastic_folders import commit_folders_here
from harness.process_tree import ancestor_with, ancestors

KILL_TO_RAISE_LIMIT = 30.0  # seconds from a killed task to run() raising (it takes about one)
# The ranks cannot import these modules: the functions they run go by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(process_tree)
cloudpickle.register_pickle_by_value(elastic_training)


def test_every_rank_runs_inside_a_task_and_the_values_come_back_in_rank_order(spark, job_token):
    def step(scale, *, offset):
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        x = np.arange(6, dtype=np.float64) * (hvd.rank() + 1) * scale + offset
        total = hvd.allreduce(x, name="x", op=hvd.Sum)
        result = {"rank": hvd.rank(), "size": hvd.size(), "total": total, "ancestors": ancestors()}
        hvd.shutdown()
        return result

    results = hvdlite.spark.run(step, args=(0.5,), kwargs={"offset": 2.0}, num_proc=2)
    expected = sum(np.arange(6, dtype=np.float64) * (rank + 1) * 0.5 + 2.0 for rank in range(2))
    assert [(r["rank"], r["size"]) for r in results] == [(0, 2), (1, 2)]
    for result in results:
        np.testing.assert_array_equal(result["total"], expected)
        assert "hydra_pmi_proxy" in result["ancestors"][0]
        assert any("pyspark" in line for line in result["ancestors"][1:]), result["ancestors"]


def test_num_proc_defaults_to_sparks_parallelism(spark, job_token):
    def rank_and_size():
        import hvdlite as hvd
        hvd.init()
        return hvd.rank(), hvd.size()

    assert hvdlite.spark.run(rank_and_size) == [(0, 2), (1, 2)]  # local[2]


def test_torch_distributed_starts_from_torchruns_variables_inside_the_tasks(spark, job_token):
    def summed():
        import os
        import torch
        import torch.distributed as dist
        import hvdlite.torch  # noqa: F401 (registers the backend)
        dist.init_process_group("hvdlite")  # env://, as under torchrun
        x = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(x)
        result = dist.get_rank(), dist.get_world_size(), float(x[0]), os.environ["MASTER_ADDR"]
        dist.destroy_process_group()
        return result

    # One host: rank 0's address is loopback (across hosts, its host's: tests/hosts/test_engines_across_hosts.py).
    assert hvdlite.spark.run(summed, num_proc=2) == [(0, 2, 3.0, "127.0.0.1"), (1, 2, 3.0, "127.0.0.1")]


class Lines:
    """An object with write(str), as spark.run's stdout takes: what the ranks printed, line by line."""

    def __init__(self):
        self.text = []

    def write(self, text):
        self.text.append(text)


LINES_A_RANK = 2000


def test_each_line_of_the_ranks_output_arrives_whole_and_with_its_time_when_asked(spark, job_token):
    # Unbuffered ranks (PYTHONUNBUFFERED: Spark sets it for its workers, and a user's may) once wrote a print's text
    # and its newline in two writes, and the other rank's line could land between them (python_rank.whole_lines).
    def says_hello():
        import hvdlite as hvd
        hvd.init()
        for line in range(LINES_A_RANK):
            print(f"rank {hvd.rank()} says hello {line}", flush=True)

    expected = sorted(f"rank {rank} says hello {line}" for rank in range(2) for line in range(LINES_A_RANK))
    stamped, plain = Lines(), Lines()
    began = datetime.datetime.now()
    unbuffered = {"PYTHONUNBUFFERED": "1"}
    hvdlite.spark.run(says_hello, num_proc=2, stdout=stamped, prefix_output_with_timestamp=True, env=unbuffered)
    ended = datetime.datetime.now()
    hvdlite.spark.run(says_hello, num_proc=2, stdout=plain, env=unbuffered)
    hellos = [line for line in "".join(stamped.text).splitlines() if "says hello" in line]
    assert sorted(line.split(" ", 1)[1] for line in hellos) == expected, stamped.text
    for line in hellos:
        assert began <= datetime.datetime.fromisoformat(line.split(" ", 1)[0]) <= ended, line
    assert sorted(line for line in "".join(plain.text).splitlines() if "says hello" in line) == expected, plain.text


def test_a_raising_rank_fails_the_run_with_its_traceback(spark, job_token):
    def fails_on_one():
        import hvdlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank 1 cannot go on")
        hvd.allreduce(np.zeros(1), name="never_completes")
        return "unreachable"

    started = time.monotonic()
    with pytest.raises(hvdlite.spark.RankFailed, match=r"(?s)rank 1.*ValueError: rank 1 cannot go on"):
        hvdlite.spark.run(fails_on_one, num_proc=2)
    assert time.monotonic() - started < 60
    assert hvdlite.spark.run(lambda: "usable again", num_proc=2) == ["usable again"] * 2


def test_a_task_killed_while_its_rank_runs_fails_the_run_promptly(spark, job_token, tmp_path):
    marker = tmp_path / "killed"

    def killed_on_one(marker):
        import time
        import hvdlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            with open(marker, "w") as stream:
                stream.write(str(time.time()))
            os.kill(ancestor_with("pyspark"), signal.SIGKILL)  # the task's process, as Spark loses an executor's worker
        time.sleep(600)  # both ranks would wait here: only the lost task ends the run

    with pytest.raises(hvdlite.spark.SlotLost, match=r"lost slot-\d"):
        hvdlite.spark.run(killed_on_one, args=(str(marker),), num_proc=2)
    kill_to_raise = time.time() - float(marker.read_text())
    print(f"from the killed task to run() raising: {kill_to_raise:.2f} s")
    assert kill_to_raise < KILL_TO_RAISE_LIMIT
    assert hvdlite.spark.run(lambda: "usable again", num_proc=2) == ["usable again"] * 2


def test_a_stage_that_cannot_start_in_time_says_so(spark, job_token):
    with pytest.raises(TimeoutError, match="0 of 3 slots registered within 5 s"):
        hvdlite.spark.run(lambda: None, num_proc=3, start_timeout=5)  # local[2] cannot hold 3 barrier tasks
    assert hvdlite.spark.run(lambda: "usable again", num_proc=2) == ["usable again"] * 2


def test_horovod_runner_on_spark_and_on_the_driver_alone(spark, job_token):
    def main(value):
        import hvdlite as hvd
        hvd.init()
        return (hvd.rank(), hvd.size(), value, any("pyspark" in line for line in ancestors()))

    assert hvdlite.spark.HorovodRunner(np=2).run(main, value=3) == (0, 2, 3, True)
    assert hvdlite.spark.HorovodRunner(np=-2).run(main, value=4) == (0, 2, 4, False)
    with pytest.raises(ValueError, match="non-zero"):
        hvdlite.spark.HorovodRunner(np=0)


@pytest.mark.long  # a training killed and resumed; run_elastic's restarts and limits: the tests below
def test_run_elastic_resumes_after_a_killed_task_with_the_parameters_of_an_uninterrupted_run(spark, job_token,
                                                                                             capfd):
    before = commit_folders_here()
    uninterrupted = hvdlite.spark.run_elastic(elastic_training.train, num_proc=2)
    resumed = hvdlite.spark.run_elastic(elastic_training.train, kwargs={"kill_after_steps": 5, "slot_word": "pyspark"},
                                        num_proc=2, min_num_proc=2, reset_limit=2)
    assert "hvdlite.spark: restart 1 on 2 slots: the job ended: lost slot-" in capfd.readouterr().err
    assert [r["restarts"] for r in uninterrupted] == [0, 0] and [r["restarts"] for r in resumed] == [1, 1]
    assert all(0 < r["resumed_at"] <= 5 and r["size"] == 2 for r in resumed), resumed
    for rank in range(2):
        for got, want in zip(resumed[rank]["parameters"], uninterrupted[rank]["parameters"]):
            np.testing.assert_array_equal(got, want)  # bitwise
    assert commit_folders_here() == before  # the ranks removed the commits at the end


@pytest.mark.long  # three elastic jobs; make test keeps the elastic run that does not restart a raising function
def test_run_elastic_gives_up_at_its_reset_limit_and_removes_the_commits(spark, job_token, capfd):
    before = commit_folders_here()
    with pytest.raises(hvdlite.spark.SlotLost, match=r"lost slot-\d"):
        hvdlite.spark.run_elastic(elastic_training.train, num_proc=2, reset_limit=1,
                                  kwargs={"kill_after_steps": 3, "slot_word": "pyspark", "kill_on_every_start": True})
    said = capfd.readouterr().err
    assert "restart 1 on 2 slots" in said and "the job failed after 1 restarts, the reset limit" in said, said
    assert commit_folders_here() == before
    assert hvdlite.spark.run(lambda: "usable again", num_proc=2) == ["usable again"] * 2


def test_run_elastic_does_not_restart_a_raising_function_and_gives_up_without_enough_cores(spark, job_token, capfd):
    def fails_on_one():
        import hvdlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank 1 cannot go on")
        hvd.allreduce(np.zeros(1), name="never_completes")

    with pytest.raises(hvdlite.spark.RankFailed, match=r"(?s)rank 1.*ValueError: rank 1 cannot go on"):
        hvdlite.spark.run_elastic(fails_on_one, num_proc=2, reset_limit=3)
    assert "restart" not in capfd.readouterr().err  # it would raise again
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"only 2 slots free after waiting 2 s for at least 3"):
        hvdlite.spark.run_elastic(lambda: None, num_proc=3, start_timeout=3, elastic_timeout=2)  # local[2]
    assert time.monotonic() - started < 60
    assert hvdlite.spark.run(lambda: "usable again", num_proc=2) == ["usable again"] * 2
