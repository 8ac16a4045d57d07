"""How torch.distributed jobs start and end with hvdlite, as whole programs: hvdliterun gives a torchrun script
torchrun's variables (on any backend: gloo here); the "hvdlite" backend honours init_process_group's timeout; a rank
that dies ends the job promptly; processes that torchrun started (not one MPI job) get a clear error, not a hang.
"""
import os
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
                assert "did not finish within 3" in str(error), error
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


def test_processes_that_are_not_one_mpi_job_get_a_clear_error(tmp_path):
    script = program(tmp_path, """
        import torch.distributed as dist
        import hvdlite.torch
        dist.init_process_group("hvdlite")
    """)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0"]
    code, output = run(torchrun + [script], timeout=180, env=launched_env())
    assert code != 0, output[-5000:]
    assert "runs on the ranks of one MPI job" in output and "hvdliterun" in output, output[-5000:]


def test_torch_variables_from_each_mpi_launcher():
    """The variables' source, for Open MPI's names too (the function that reads them, on given environments)."""
    from hvdlite.runner.torch_variables import rank_variables
    assert rank_variables({"PMI_RANK": "3", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}) == \
        {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert rank_variables({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6",
                           "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "3"}) == \
        {"RANK": "5", "WORLD_SIZE": "6", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "3"}
    assert rank_variables({}) == {}

