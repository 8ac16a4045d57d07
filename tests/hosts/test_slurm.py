"""Jobs that a real Slurm schedules (Debian's slurm-wlm: slurmctld, a slurmd on each of 2 simulated hosts; see
harness/slurm_cluster.py), 2 hosts x 2 ranks, with hvdlite's default MPI (MPICH's wheel):

- `srun --mpi=pmi2 python train.py` (Slurm's PMI-2 serves MPICH's ranks): ranks, local ranks and hosts as Slurm
  places them; a Horovod-API training reaches the accuracy of the same training in one process; the
  torch.distributed backend's DDP script trains; without a PMI (`--mpi=none`) every task fails saying so; with
  --kill-on-bad-exit a killed task ends the step on both hosts;
- `sbatch` of a script calling `hvdliterun -np 4 python train.py`: hvdliterun takes the allocation's hosts and
  slots from Slurm's variables and starts the ranks through srun (not ssh: no host here runs sshd); a job that a
  rank fails restarts inside the allocation (--max-restarts) and resumes from its last commit; a killed rank ends
  the job on every host; scancel ends every rank; inside a job step hvdliterun starts its ranks on that host
  (another srun would wait for the CPUs the step holds).
"""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from harness.launch_programs import ELASTIC, LOOP, PLACED, REPORT, check_elastic_restart, command_line
from harness.processes import QUIET_THREADS, ROOT, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, hosts_for_tests
from harness.slurm_cluster import SlurmCluster
from harness.slurm_cluster import missing as slurm_missing

pytestmark = [pytest.mark.simulated_hosts]

EXAMPLES = os.path.join(ROOT, "examples")
TASKS = ["-N", "2", "--ntasks-per-node", "2"]

@pytest.fixture(scope="module")
def slurm():
    problem = slurm_missing()
    if problem:
        pytest.fail(f"the Slurm tests {problem}")
    with hosts_for_tests(2, "the Slurm tests") as hosts, SlurmCluster(hosts) as cluster:
        yield cluster


# libfabric's TCP provider, as every simulated-hosts test over MPICH's libfabric layer selects it (its own choice
# of provider hangs on these hosts). MPICH's network layer itself is left to choose: under Slurm's PMI hvdlite picks
# libfabric's (hvdlite/mpi_start.py), where UCX's default would fail.
FABRIC = {name: value for name, value in NETWORK_LAYERS["ofi"].items() if name != "MPIR_CVAR_CH4_NETMOD"}


def _env(**extra):
    return dict(QUIET_THREADS, **FABRIC, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60", **extra)


def _reports(folder):
    return [(folder / f"rank{rank}").read_text().split() for rank in range(4)]


def _sbatch(slurm, tmp_path, body, timeout=240, **env):
    """Submits a batch script (body: its commands) for 2 hosts x 2 tasks and waits for its end; returns (exit code,
    the job's output, seconds from submission to the end)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    output = tmp_path / "slurm.out"
    started = time.time()
    result = slurm.run("h1", ["sbatch", "--wait", *TASKS, "-o", str(output), "-D", str(tmp_path), str(script)],
                       timeout=timeout, env=slurm.env(**_env(**env)))
    text = output.read_text() if output.exists() else ""
    return result.returncode, result.stdout + text, time.time() - started


def test_srun_with_pmi2_places_every_rank_where_slurm_puts_its_task(slurm, tmp_path):
    (tmp_path / "report.py").write_text(REPORT)
    result = slurm.run("h1", ["srun", *TASKS, "--mpi=pmi2", sys.executable, str(tmp_path / "report.py"),
                              str(tmp_path)], timeout=120, env=slurm.env(**_env()))
    assert result.returncode == 0, result.stdout[-6000:]
    assert [report[:6] for report in _reports(tmp_path)] == PLACED


def test_srun_without_a_pmi_fails_every_task_saying_what_to_give_srun(slurm, tmp_path):
    """srun --mpi=none (a cluster's MpiDefault may be that): MPI starts every task alone. Each of the 4 tasks stops
    at hvd.init() naming itself and srun's --mpi=pmi2, rather than training alone."""
    (tmp_path / "report.py").write_text(REPORT)
    result = slurm.run("h1", ["srun", *TASKS, "--mpi=none", sys.executable, str(tmp_path / "report.py"),
                              str(tmp_path)], timeout=120, env=slurm.env(**_env()))
    assert result.returncode != 0, result.stdout[-6000:]
    for task in range(4):
        assert f"this process is task {task} of 4 that srun started" in result.stdout, result.stdout[-6000:]
    assert "srun --mpi=pmi2" in result.stdout, result.stdout[-6000:]
    assert not list(tmp_path.glob("rank*")), "a task went on alone"


def _final_accuracy(output, pattern):
    final = re.search(pattern, output)
    assert final, output[-6000:]
    losses = [float(x) for x in re.findall(r"train loss ([\d.]+)", output)]
    assert losses and losses[-1] < losses[0] / 10, losses  # it learns
    return final


def test_a_horovod_api_training_under_srun_reaches_the_one_process_accuracy(slurm, tmp_path):
    """examples/torch_digits.py (hvd.DistributedOptimizer) on 2 hosts x 2 tasks through srun, each rank with a
    quarter of the batch and learning rate (the example scales the rate by the ranks), so that the global batch and
    rate are the one-process run's: within 2 points (7 of the 360 test images) of that run's test accuracy."""
    example = os.path.join(EXAMPLES, "torch_digits.py")
    alone = subprocess.run([sys.executable, example], env=dict(os.environ, **_env()), capture_output=True,
                           text=True, timeout=300)
    assert alone.returncode == 0, (alone.stdout + alone.stderr)[-6000:]
    one = float(_final_accuracy(alone.stdout, r"ranks 1 .* final test accuracy ([\d.]+)%").group(1))
    result = slurm.run("h1", ["srun", *TASKS, "--mpi=pmi2", sys.executable, example, "--batch-size", "8",
                              "--lr", "0.0125"], timeout=300, env=slurm.env(**_env()))
    assert result.returncode == 0, result.stdout[-6000:]
    four = float(_final_accuracy(result.stdout, r"ranks 4 .* final test accuracy ([\d.]+)%").group(1))
    assert one > 95.0 and four > 95.0 and abs(one - four) <= 2.0, (one, four)


def test_the_torch_distributed_backends_ddp_script_trains_under_srun(slurm, tmp_path):
    """examples/torch_ddp_digits.py on init_process_group("hvdlite"): rank and size from MPI (Slurm's PMI-2), torch's
    store served by rank 0 on its host."""
    result = slurm.run("h1", ["srun", *TASKS, "--mpi=pmi2", sys.executable,
                              os.path.join(EXAMPLES, "torch_ddp_digits.py"), "--epochs", "8"],
                       timeout=300, env=slurm.env(**_env()))
    assert result.returncode == 0, result.stdout[-6000:]
    accuracy = float(_final_accuracy(result.stdout, r"ranks 4  backend hvdlite .* final test accuracy ([\d.]+)%")
                     .group(1))
    assert accuracy > 90.0, result.stdout[-3000:]


def test_hvdliterun_in_a_batch_script_runs_on_the_allocation_through_srun(slurm, tmp_path):
    """sbatch -N 2 --ntasks-per-node 2 of `hvdliterun -np 4 --verbose python report.py`: the ranks land on the
    allocation's hosts, two each, started through srun (hydra's Slurm launcher; no sshd runs on these hosts). The
    time from sbatch to every rank's first all-reduce is printed (docs/launcher.md quotes it)."""
    (tmp_path / "report.py").write_text(REPORT)
    submitted = time.time()
    code, output, _ = _sbatch(slurm, tmp_path, f"""
        {venv_tool("hvdliterun")} -np 4 --verbose {sys.executable} {tmp_path / "report.py"} {tmp_path}
    """)
    assert code == 0, output[-6000:]
    reports = _reports(tmp_path)
    assert [report[:6] for report in reports] == PLACED, output[-3000:]
    assert "-launcher slurm" in output and "hvdliterun: h2: ranks 2, 3 (started through srun)" in output, output
    first_step = max(float(report[6]) for report in reports) - submitted
    print(f"from sbatch to the first all-reduce of every rank: {first_step:.2f} s")
    assert first_step < 60, first_step


def test_a_job_restarts_inside_its_allocation_and_resumes_from_its_last_commit(slurm, tmp_path):
    """--max-restarts in a batch script: the last rank (on h2) is killed after the commit of step 10; hvdliterun
    starts the job again on the same allocation through srun, every rank resumes from the same newest commit
    (each host keeps its own), and the result is exact."""
    (tmp_path / "elastic.py").write_text(ELASTIC)
    code, output, _ = _sbatch(slurm, tmp_path, f"""
        {venv_tool("hvdliterun")} -np 4 --max-restarts 1 {sys.executable} {tmp_path / "elastic.py"} {tmp_path}
    """, HVDLITE_ELASTIC_COMMIT_DIR=str(tmp_path / "commits" / "{host}"))
    assert code == 0, output[-6000:]
    assert "hvdliterun: restart 1: the job failed" in output, output[-4000:]
    check_elastic_restart(tmp_path)


ENDS_WITHIN_S = 30


def _ranks_left(slurm, program):
    """{host: [pids of processes running program]}."""
    left = {}
    for host in slurm.names:
        pids = [pid for pid in slurm.hosts.pids(host) if program in command_line(pid)]
        if pids:
            left[host] = pids
    return left


def test_a_killed_rank_ends_the_job_on_every_host(slurm, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    code, output, took = _sbatch(slurm, tmp_path, f"""
        {venv_tool("hvdliterun")} -np 4 {sys.executable} {tmp_path / "loop.py"} {tmp_path} die
    """, timeout=120)
    assert code != 0, output[-6000:]
    assert all((tmp_path / f"started{rank}").exists() for rank in range(4)), output[-6000:]
    time.sleep(1)  # processes just killed may still be leaving
    assert not _ranks_left(slurm, str(tmp_path / "loop.py")), output[-3000:]
    assert took < 60 + ENDS_WITHIN_S, took


def test_srun_with_kill_on_bad_exit_ends_every_task_when_one_is_killed(slurm, tmp_path):
    """srun starting the ranks itself: --kill-on-bad-exit=1 (the flag docs/launcher.md tells users to give) ends
    the step on both hosts when a task is killed."""
    (tmp_path / "loop.py").write_text(LOOP)
    started = time.monotonic()
    result = slurm.run("h1", ["srun", *TASKS, "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable,
                              str(tmp_path / "loop.py"), str(tmp_path), "die"], timeout=120, env=slurm.env(**_env()))
    took = time.monotonic() - started
    assert result.returncode != 0 and "task 3: Killed" in result.stdout, result.stdout[-6000:]
    assert all((tmp_path / f"started{rank}").exists() for rank in range(4)), result.stdout[-6000:]
    assert took < ENDS_WITHIN_S, (took, result.stdout[-3000:])
    assert not _ranks_left(slurm, str(tmp_path / "loop.py"))


def test_scancel_ends_every_rank(slurm, tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{venv_tool('hvdliterun')} -np 4 {sys.executable} {tmp_path / 'loop.py'} "
                      f"{tmp_path} loop\n")
    submitted = slurm.run("h1", ["sbatch", "--parsable", *TASKS, "-o", str(tmp_path / "slurm.out"),
                                 "-D", str(tmp_path), str(script)], timeout=60, env=slurm.env(**_env()))
    assert submitted.returncode == 0, submitted.stdout
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"started{rank}").exists() for rank in range(4)):
        assert time.monotonic() < deadline, (tmp_path / "slurm.out").read_text()[-6000:]
        time.sleep(0.2)
    assert set(_ranks_left(slurm, str(tmp_path / "loop.py"))) == {"h1", "h2"}
    cancelled = time.monotonic()
    assert slurm.run("h1", ["scancel", job], timeout=30).returncode == 0
    while _ranks_left(slurm, str(tmp_path / "loop.py")) or _queued(slurm, job):
        assert time.monotonic() - cancelled < ENDS_WITHIN_S, (_ranks_left(slurm, str(tmp_path / "loop.py")),
                                                               (tmp_path / "slurm.out").read_text()[-3000:])
        time.sleep(0.5)


def _queued(slurm, job):
    return slurm.run("h1", ["squeue", "-h", "-j", job], timeout=30).stdout.strip() != ""


def test_hvdliterun_inside_a_job_step_starts_its_ranks_on_that_host(slurm, tmp_path):
    """`srun -N 1 -n 1 hvdliterun -np 2 ...` (an interactive shell on a node runs in a step too): the step holds
    the CPUs another srun would ask for, so hvdliterun starts both ranks on the step's host (mpiexec alone would
    see Slurm and wait in srun forever)."""
    (tmp_path / "report.py").write_text(REPORT)
    result = slurm.run("h1", ["salloc", *TASKS, "srun", "-N", "1", "-n", "1", venv_tool("hvdliterun"), "-np", "2",
                              sys.executable, str(tmp_path / "report.py"), str(tmp_path)],
                       timeout=120, env=slurm.env(**_env()))
    assert result.returncode == 0, result.stdout[-6000:]
    reports = [(tmp_path / f"rank{rank}").read_text().split() for rank in range(2)]
    assert [report[:6] for report in reports] == [["0", "2", "h1", "0/2", "0/1", "True"],
                                                   ["1", "2", "h1", "1/2", "0/1", "True"]]
