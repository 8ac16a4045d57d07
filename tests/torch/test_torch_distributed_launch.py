"""How torch.distributed jobs start and end with hvdlite, as whole programs: hvdliterun gives a torchrun script
torchrun's variables (on any backend: gloo here); the "hvdlite" backend honours init_process_group's timeout; a rank
that dies ends the job promptly; processes that torchrun or torch.multiprocessing.spawn started become one MPI job
(through a PMI server that rank 0 runs, found in torch's store), and a rank lost on the way fails the others.
"""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from harness.processes import run, with_hvdlite_importable

HVDLITERUN = [sys.executable, "-m", "hvdlite.runner"]


def program(tmp_path, text):
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def launched_env():
    env = with_hvdlite_importable(dict(os.environ))
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    return env


@pytest.mark.parametrize("nranks", [2, 3])
def test_hvdliterun_gives_a_torchrun_script_its_variables(tmp_path, nranks):
    script = program(tmp_path, """
        import os, torch, torch.distributed as dist
        env = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                                          "MASTER_PORT")}
        dist.init_process_group("gloo")  # torchrun's rendezvous: env://
        rank, size = dist.get_rank(), dist.get_world_size()
        assert (rank, size) == (int(env["RANK"]), int(env["WORLD_SIZE"])), env
        assert int(env["LOCAL_RANK"]) == rank and int(env["LOCAL_WORLD_SIZE"]) == size, env  # one host
        x = torch.full((3,), float(rank))
        dist.all_reduce(x)
        assert x.tolist() == [float(sum(range(size)))] * 3, x
        with open(os.path.join(os.path.dirname(__file__), f"rank{rank}"), "w") as f:
            f.write(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}")
        dist.destroy_process_group()
    """)
    code, output = run(HVDLITERUN + ["-np", str(nranks), sys.executable, script], timeout=180, env=launched_env())
    assert code == 0, output[-5000:]
    masters = {(tmp_path / f"rank{r}").read_text() for r in range(nranks)}
    assert len(masters) == 1, f"every rank got the same MASTER_ADDR and MASTER_PORT: {masters}"


def test_destroy_and_init_again(tmp_path):
    script = program(tmp_path, """
        import os, torch, torch.distributed as dist
        import hvdlite.torch
        for start in range(3):
            dist.init_process_group("hvdlite")
            rank, size = dist.get_rank(), dist.get_world_size()
            x = torch.full((4,), float(rank + start))
            dist.all_reduce(x)
            assert x.tolist() == [float(sum(range(size)) + size * start)] * 4, (start, x)
            group = dist.new_group([0, size - 1])
            if rank in (0, size - 1):
                y = torch.ones(2)
                dist.all_reduce(y, group=group)
                assert y.tolist() == [2.0, 2.0], (start, y)
            dist.barrier()  # a rank that leaves hvdlite (exits) ends it for all: the others finish first
            dist.destroy_process_group()
        open(os.path.join(os.path.dirname(__file__), f"ok.{rank}"), "w").close()
    """)
    code, output = run(HVDLITERUN + ["-np", "3", sys.executable, script], timeout=120, env=launched_env())
    assert code == 0 and all((tmp_path / f"ok.{r}").exists() for r in range(3)), output[-5000:]


def test_init_process_group_timeout_is_honoured(tmp_path):
    script = program(tmp_path, """
        import datetime, os, time, torch, torch.distributed as dist
        import hvdlite.torch
        dist.init_process_group("hvdlite", timeout=datetime.timedelta(seconds=3))
        rank = dist.get_rank()
        if rank == 0:
            start = time.monotonic()
            try:
                dist.all_reduce(torch.ones(4))  # rank 1 comes 8 s late
                raise SystemExit("the all_reduce did not time out")
            except dist.DistBackendError as error:
                waited = time.monotonic() - start
                assert "Timed out waiting 3000 ms" in str(error), error
                assert 2.5 < waited < 6, waited
                open(os.path.join(os.path.dirname(__file__), "timed_out"), "w").write(f"{waited:.1f}")
            time.sleep(6)  # until rank 1 is back: the barrier below has 3 s too
        else:
            time.sleep(8)
            dist.all_reduce(torch.ones(4))  # meets rank 0's, which is still in flight
        dist.barrier()
        open(os.path.join(os.path.dirname(__file__), f"done.{rank}"), "w").close()
        dist.destroy_process_group()
    """)
    code, output = run(HVDLITERUN + ["-np", "2", sys.executable, script], timeout=120, env=launched_env())
    assert code == 0, output[-5000:]
    assert (tmp_path / "timed_out").exists() and (tmp_path / "done.0").exists() and (tmp_path / "done.1").exists()


def test_a_dead_rank_ends_the_job_promptly(tmp_path):
    script = program(tmp_path, """
        import os, torch, torch.distributed as dist
        import hvdlite.torch
        dist.init_process_group("hvdlite")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
        for step in range(1000):
            if step == 3 and dist.get_rank() == 1:
                os._exit(7)  # dies between two steps, as a lost worker does
            model(torch.randn(8, 64)).sum().backward()
        print("finished all steps", flush=True)
    """)
    start = time.monotonic()
    code, output = run(HVDLITERUN + ["-np", "2", sys.executable, script], timeout=120, env=launched_env())
    took = time.monotonic() - start
    assert code != 0 and "finished all steps" not in output, output[-5000:]
    assert took < 60, f"the job took {took:.0f} s to end after a rank died"


ONE_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "one_job.py")


def torchrun_argv(nprocs, script, out):
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nprocs), "--master-port", "0",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", script, str(out)]


def reports(out, size):
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]


def check_one_host_reports(out, size):
    for r, report in enumerate(reports(out, size)):
        assert report == {"rank": r, "size": size, "host": report["host"], "local_rank": r, "local_size": size}


@pytest.mark.parametrize("nranks", [2, pytest.param(3, marks=pytest.mark.long)])
def test_ranks_torchrun_started_become_one_mpi_job(tmp_path, nranks):
    code, output = run(torchrun_argv(nranks, ONE_JOB, tmp_path), timeout=240, env=launched_env())
    assert code == 0, output[-5000:]
    check_one_host_reports(tmp_path, nranks)


@pytest.mark.long
def test_ranks_torch_multiprocessing_spawn_started_become_one_mpi_job(tmp_path):
    script = program(tmp_path, f"""
        import os, socket, sys
        sys.path.insert(0, {os.path.dirname(ONE_JOB)!r})
        import torch.distributed as dist
        import torch.multiprocessing as mp
        from one_job import check_job

        def worker(rank, size, port, out):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            dist.init_process_group("hvdlite", rank=rank, world_size=size)
            check_job(out)
            dist.destroy_process_group()

        if __name__ == "__main__":
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            mp.spawn(worker, args=(3, port, sys.argv[1]), nprocs=3)
    """)
    code, output = run([sys.executable, script, str(tmp_path)], timeout=240, env=launched_env())
    assert code == 0, output[-5000:]
    check_one_host_reports(tmp_path, 3)


@pytest.mark.long
def test_torchrun_restarts_the_workers_as_a_new_mpi_job(tmp_path):
    """torchrun --max-restarts 1: rank 1 of the first attempt dies after a step; torchrun ends rank 0 and starts
    both again, and the new workers make a new MPI job (a new PMI server) that passes the job's checks."""
    script = program(tmp_path, f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(ONE_JOB)!r})
        import torch, torch.distributed as dist
        from one_job import check_job
        dist.init_process_group("hvdlite")
        dist.all_reduce(torch.ones(4))
        if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and dist.get_rank() == 1:
            os._exit(5)
        check_job(sys.argv[1])
        dist.destroy_process_group()
    """)
    torchrun = torchrun_argv(2, script, tmp_path)
    code, output = run(torchrun[:3] + ["--max-restarts", "1"] + torchrun[3:], timeout=240, env=launched_env())
    assert code == 0, output[-5000:]
    check_one_host_reports(tmp_path, 2)


@pytest.mark.long
def test_a_horovod_script_runs_under_torchrun(tmp_path):
    """hvd.init() with no process group: the ranks meet through the store of torchrun's agent."""
    script = program(tmp_path, """
        import os, sys
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        assert (hvd.rank(), hvd.size()) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
        inputs = lambda r: np.arange(100, dtype=np.float64) * (r + 2)
        total = hvd.allreduce(inputs(hvd.rank()), op=hvd.Sum, name="total")
        assert np.array_equal(total, sum(inputs(r) for r in range(hvd.size()))), total[:4]
        open(os.path.join(sys.argv[1], f"ok.{hvd.rank()}"), "w").close()
    """)
    code, output = run(torchrun_argv(2, script, tmp_path), timeout=240, env=launched_env())
    assert code == 0 and all((tmp_path / f"ok.{r}").exists() for r in range(2)), output[-5000:]


@pytest.mark.long
def test_a_rank_lost_before_mpi_starts_fails_the_others_within_the_timeout(tmp_path):
    """Three ranks started by hand with torch's env:// variables, as a user's own launcher starts them (torchrun
    would end the others itself). Rank 2 passes torch's rendezvous and its process ends just before it would start
    MPI: ranks 0 and 1, already in MPI's start, fail once init_process_group's timeout has passed, rank 0 saying
    which rank never came."""
    script = program(tmp_path, """
        import datetime, os
        import torch.distributed as dist
        import hvdlite.mpi_start
        import hvdlite.torch
        join = hvdlite.mpi_start.join_through_store

        def join_or_end(MPI, store, rank, size, timeout_seconds):
            if rank == 2:
                os._exit(3)  # ends as a lost worker does, past torch's rendezvous
            join(MPI, store, rank, size, timeout_seconds)
        hvdlite.mpi_start.join_through_store = join_or_end
        dist.init_process_group("hvdlite", timeout=datetime.timedelta(seconds=5))
        print("joined", dist.get_rank(), flush=True)
    """)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(launched_env(), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="3"))
             for rank in range(3)]
    try:
        outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    took = time.monotonic() - start
    assert all(rank.returncode != 0 for rank in ranks), outputs
    assert not any("joined" in output for output in outputs), outputs
    assert "ranks [2] did not reach the barrier within 5 s (ranks [2] never connected)" in outputs[0], outputs[0]
    assert took < 60, f"the ranks took {took:.0f} s to end"


@pytest.mark.long
def test_mpi_started_before_the_ranks_meet_gets_a_clear_error(tmp_path):
    script = program(tmp_path, """
        import os, socket, sys
        import torch.distributed as dist
        import torch.multiprocessing as mp
        import hvdlite.torch as hvd

        def worker(rank, port):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            hvd.init()  # MPI starts alone: the ranks have not met yet
            dist.init_process_group("hvdlite", rank=rank, world_size=2)

        if __name__ == "__main__":
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            mp.spawn(worker, args=(port,), nprocs=2)
    """)
    code, output = run([sys.executable, script], timeout=240, env=launched_env())
    assert code != 0, output[-5000:]
    assert "runs on the ranks of one MPI job" in output and "hvd.init() before init_process_group" in output, \
        output[-5000:]


def test_which_processes_start_mpi_when_the_ranks_meet():
    """The decision alone, on given environments (mpi_start.started_by_torch): an MPI launcher's variables win; a
    torchrun worker or a multiprocessing child waits; a program started by hand starts MPI at import."""
    from hvdlite.mpi_start import started_by_torch
    torchrun = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2"}
    assert started_by_torch(torchrun, process_name="MainProcess")
    assert started_by_torch({}, process_name="SpawnProcess-1")
    assert started_by_torch({"RANK": "1", "WORLD_SIZE": "2"}, process_name="MainProcess")  # a user's launcher
    assert not started_by_torch({}, process_name="MainProcess")
    assert not started_by_torch({**torchrun, "PMI_RANK": "0"}, process_name="MainProcess")
    assert not started_by_torch({"OMPI_COMM_WORLD_SIZE": "2"}, process_name="SpawnProcess-1")


def test_torch_variables_from_each_mpi_launcher():
    """The variables' source, for Open MPI's names too (the function that reads them, on given environments)."""
    from hvdlite.runner.torch_variables import rank_variables
    assert rank_variables({"PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}) == \
        {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert rank_variables({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
                           "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}) == \
        {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3"}
    assert rank_variables({}) == {}

