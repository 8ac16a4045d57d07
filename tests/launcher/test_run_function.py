"""hvdlite.run(func, ...): horovod.run, the launcher as a function. Real jobs through hvdliterun: every rank calls
the function (defined here, so pickled by value as a notebook's would be) and the caller gets the return values by
rank; a raising rank's traceback, an unpicklable return value and a failed job are errors that say so; an elastic
run returns what its last start returned. Across hosts (through ssh servers): test_launcher_over_ssh.py."""
import os
import uuid

import numpy as np
import pytest

import hvdlite
from hvdlite.runner.function_runner import RankFailed
from hvdlite.runner.job import processes_with_environment

pytestmark = pytest.mark.openmpi


@pytest.fixture
def job_token(monkeypatch):
    """A variable every process of the job inherits, to find any left behind."""
    token = uuid.uuid4().hex
    monkeypatch.setenv("HVDLITE_TEST_TOKEN", token)
    yield token
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


def test_every_rank_runs_the_function_and_the_caller_gets_its_values_by_rank(job_token):
    def step(scale, *, offset):
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        x = np.arange(5, dtype=np.float64) * (hvd.rank() + 1) * scale + offset
        total = hvd.allreduce(x, name="x", op=hvd.Sum)
        result = {"rank": hvd.rank(), "size": hvd.size(), "total": total}
        hvd.shutdown()
        return result

    results = hvdlite.run(step, args=(0.5,), kwargs={"offset": 2.0}, num_proc=3)
    expected = sum(np.arange(5, dtype=np.float64) * (rank + 1) * 0.5 + 2.0 for rank in range(3))
    assert [(r["rank"], r["size"]) for r in results] == [(0, 3), (1, 3), (2, 3)]
    for result in results:
        np.testing.assert_array_equal(result["total"], expected)


def test_horovods_old_argument_name_np_is_taken_with_its_warning(job_token):
    def rank():
        import os
        return int(os.environ.get("PMI_RANK") or os.environ["OMPI_COMM_WORLD_RANK"])

    with pytest.warns(DeprecationWarning, match="np is deprecated"):
        assert hvdlite.run(rank, np=2) == [0, 1]


def test_horovod_runners_import_spelling_runs_it_too(job_token):
    from hvdlite.runner import run  # as `from horovod.runner import run`

    def size():
        import os
        return int(os.environ.get("PMI_SIZE") or os.environ["OMPI_COMM_WORLD_SIZE"])

    assert run(size, num_proc=2) == [2, 2]


def test_a_raising_rank_is_an_error_with_its_traceback(job_token):
    def fail_on_one():
        import hvdlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank one cannot go on")
        hvd.barrier()  # rank 0 waits here until the job is ended
        return "unreached"

    with pytest.raises(RankFailed) as error:
        hvdlite.run(fail_on_one, num_proc=2)
    message = str(error.value)
    assert "the function raised on rank" in message
    rank_one = message.split("--- rank 1 ---\n")[1].split("--- rank")[0]
    assert "Traceback" in rank_one and "ValueError: rank one cannot go on" in rank_one, message


def test_a_return_value_that_cannot_be_pickled_is_an_error_saying_so(job_token):
    def lock():
        import threading
        return threading.Lock()

    with pytest.raises(RankFailed, match="return value cannot be pickled"):
        hvdlite.run(lock, num_proc=2)


def test_a_job_that_fails_before_any_result_is_an_error(job_token):
    def leave():
        import os
        os._exit(5)

    with pytest.raises(RuntimeError, match="the job failed with exit code"):
        hvdlite.run(leave, num_proc=2)


@pytest.mark.parametrize("arguments, message", [({"use_gloo": True}, "MPI only"),
                                                ({"hosts": "a:1", "hostfile": "f"}, "either hosts or hostfile")])
def test_arguments_hvdlite_cannot_honour_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        hvdlite.run(print, num_proc=2, **arguments)


@pytest.mark.timeout(180)
def test_an_elastic_run_returns_what_its_last_start_returned(job_token, tmp_path):
    """Rank 1 dies at the first start, after a commit; the job restarts on this host's slots and resumes from it."""
    def train(folder):
        import os
        import hvdlite as hvd
        from hvdlite.elastic import ObjectState, run

        @run
        def steps(state):
            while state.step < 4:
                state.step += 1
                state.commit()
                if state.step == 2 and hvd.rank() == 1 and os.environ["HVDLITE_ELASTIC_RESTART"] == "0":
                    os._exit(1)
            return hvd.rank(), hvd.size(), state.step, os.environ["HVDLITE_ELASTIC_RESTART"]

        hvd.init()
        return steps(ObjectState(step=0))

    results = hvdlite.run(train, args=(str(tmp_path),), num_proc=2, min_num_proc=2, max_num_proc=2, reset_limit=2)
    assert results == [(0, 2, 4, "1"), (1, 2, 4, "1")]


def test_an_interrupted_caller_ends_the_job_and_leaves_nothing_running(job_token, tmp_path):
    """Ctrl-C in the caller (here SIGINT to it alone, in a session of its own, so that only hvdlite.run can pass it
    on) of an elastic run that has committed: the job ends, nothing of it is left running or on disk (the launcher
    removes the commits of a job it was told to stop), and the call raises KeyboardInterrupt."""
    import signal
    import subprocess
    import sys
    import textwrap

    from harness.elastic_folders import commit_folders_here
    from harness.processes import read_until

    folders_before = commit_folders_here()
    caller = tmp_path / "caller.py"
    # The caller takes Ctrl-C as a terminal's program does, also where this test runs in the background of a
    # script (which starts it with SIGINT ignored, and Python then never raises KeyboardInterrupt).
    caller.write_text(textwrap.dedent("""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)

        import hvdlite

        def wait():
            import time
            import hvdlite as hvd
            from hvdlite.elastic import ObjectState, run

            @run
            def steps(state):
                state.step += 1
                state.commit()
                print("UP", flush=True)
                time.sleep(600)

            hvd.init()
            steps(ObjectState(step=0))

        try:
            hvdlite.run(wait, num_proc=2, min_num_proc=2)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
    """))
    process = subprocess.Popen([sys.executable, str(caller)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        seen = read_until(process, "UP", 2, "the ranks were up")
        os.kill(process.pid, signal.SIGINT)
        rest = process.communicate(timeout=60)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert "INTERRUPTED" in rest, (seen + rest)[-3000:]
    assert commit_folders_here() - folders_before == set(), (seen + rest)[-3000:]
