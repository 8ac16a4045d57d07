"""hvdliterun across hosts whose processes start as ssh starts them: a job launched from a third host onto two
simulated hosts (hvdlite/testing/simulated_hosts.py; needs root), whose launcher program runs the command in the host
with a bare environment and relays its output, as ssh does. Every rank still gets the launcher's environment (the
user's settings, variables of any name) and the variables the launcher itself sets (its address, the job's
marker, the elastic job and restart number), lands where -H puts it, knows its host's ranks and all-reduces
correctly; a rank killed or a host cut off ends the job within seconds; an elastic job restarts after a rank is
killed and resumes from the newest commit, and one that fails without restarts has its commits removed on both
hosts. Run with MPICH here and with Open MPI by `make test-openmpi`: hydra
sends the environment along by itself, Open MPI only the variables it is told to (-x).
"""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from harness.elastic_folders import commit_folders_here
from harness.launch_programs import ELASTIC, LOOP, check_elastic_restart, command_line
from harness.processes import QUIET_THREADS, TESTS_DIR, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, SimulatedHosts, available
from harness.ssh_servers import SshServers
from harness.ssh_servers import missing as ssh_missing
from hvdlite.runner.mpiexec import OPENMPI, detect_flavour, find_mpiexec

pytestmark = [pytest.mark.simulated_hosts, pytest.mark.openmpi]

GIVEN_UP = os.path.join(TESTS_DIR, "elastic", "workers", "given_up.py")
VARIABLES = ("HVDLITE_CYCLE_TIME", "OMP_NUM_THREADS", "MY_SETTING", "HVDLITE_LAUNCHER", "HVDLITE_JOB_ID",
             "HVDLITE_ELASTIC_JOB", "HVDLITE_ELASTIC_RESTART")

JOB = f"""
import os, socket, sys
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
correct = True
for count in (1000, 1 << 20):  # one message, and one that the core splits between hosts and within them
    out = hvd.allreduce(np.arange(count, dtype=np.float64) * (rank + 1), name=f"x{{count}}", op=hvd.Sum)
    correct &= bool(np.array_equal(out, np.arange(count, dtype=np.float64) * sum(range(1, size + 1))))
with open(os.path.join(sys.argv[1], f"rank{{rank}}"), "w") as report:  # the hosts share this machine's files
    print(rank, socket.gethostname(), f"{{hvd.local_rank()}}/{{hvd.local_size()}}",
          f"{{hvd.cross_rank()}}/{{hvd.cross_size()}}", correct,
          *[os.environ.get(name, "-") for name in {VARIABLES!r}], file=report)
hvd.shutdown()
"""


def test_ranks_on_other_hosts_get_the_settings_and_the_launchers_variables(tmp_path):
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = dict(os.environ, **QUIET_THREADS, MY_SETTING="seven")
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec,
                                  "-np", "4", "-H", "h1:2,h2:2", "--max-restarts", "1", "--cycle-time-ms", "3",
                                  sys.executable, str(tmp_path / "job.py"), str(tmp_path)],
                           timeout=120, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    seen = [(tmp_path / f"rank{rank}").read_text().split() for rank in range(4)]
    assert [report[:5] for report in seen] == [["0", "h1", "0/2", "0/2", "True"], ["1", "h1", "1/2", "0/2", "True"],
                                               ["2", "h2", "0/2", "1/2", "True"], ["3", "h2", "1/2", "1/2", "True"]]
    values = [dict(zip(VARIABLES, report[5:])) for report in seen]
    for rank, got in enumerate(values):
        missing = [name for name, value in got.items() if value == "-"]
        assert not missing, f"rank {rank} lacks {missing}"
    assert all(got == values[0] for got in values), values  # the same job, the same start, the same launcher
    assert values[0]["HVDLITE_CYCLE_TIME"] == "3" and values[0]["HVDLITE_ELASTIC_RESTART"] == "0"
    assert values[0]["MY_SETTING"] == "seven" and values[0]["OMP_NUM_THREADS"] == "1"


def test_ranks_start_through_real_ssh_servers_on_a_port_and_key_of_their_own(tmp_path):
    """horovodrun's -p PORT and -i KEY: OpenSSH's sshd on h1 and h2 listens on port 2222 only and lets in only the
    test's key. Without -p the launcher's host check names the refused port and nothing starts; with -p and -i the
    ranks start on both hosts through ssh itself and all-reduce correctly."""
    problem = available() or ssh_missing()
    if problem:
        pytest.fail(f"this test needs simulated hosts with ssh servers: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    job = [sys.executable, str(tmp_path / "job.py"), str(tmp_path)]
    env = dict(os.environ, **QUIET_THREADS)
    with SimulatedHosts(3) as hosts, SshServers(hosts, ["h1", "h2"], client="h3", port=2222) as ssh:
        refused = hosts.run("h3", [venv_tool("hvdliterun"), "-np", "2", "-H", "h1:1,h2:1", *job],
                            timeout=60, env=env, cwd=str(tmp_path))
        result = hosts.run("h3", [venv_tool("hvdliterun"), "-p", "2222", "-i", ssh.key, "-np", "4",
                                  "-H", "h1:2,h2:2", *job], timeout=120, env=env, cwd=str(tmp_path))
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert "host 'h1' is unreachable" in refused.stdout and "port 22: Connection refused" in refused.stdout
    assert result.returncode == 0, result.stdout[-6000:]
    seen = [(tmp_path / f"rank{rank}").read_text().split()[:5] for rank in range(4)]
    assert seen == [["0", "h1", "0/2", "0/2", "True"], ["1", "h1", "1/2", "0/2", "True"],
                    ["2", "h2", "0/2", "1/2", "True"], ["3", "h2", "1/2", "1/2", "True"]]


def test_a_function_run_from_a_third_host_returns_every_ranks_value(tmp_path):
    """hvdlite.run(func, hosts=..., ssh_port=..., ssh_identity_file=...) from h3: ranks on h1 and h2, started through
    ssh itself, fetch the function from the caller on h3 by its host name and send their values back there."""
    problem = available() or ssh_missing()
    if problem:
        pytest.fail(f"this test needs simulated hosts with ssh servers: {problem}")
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""
        import sys
        import hvdlite

        def where(count):
            import socket
            import numpy as np
            import hvdlite as hvd
            hvd.init()
            out = hvd.allreduce(np.arange(count, dtype=np.float64) * (hvd.rank() + 1), name="x", op=hvd.Sum)
            right = bool(np.array_equal(out, np.arange(count, dtype=np.float64) * 10))
            return hvd.rank(), socket.gethostname(), right

        results = hvdlite.run(where, args=(1 << 18,), num_proc=4, hosts="h1:2,h2:2", ssh_port=2222,
                              ssh_identity_file=sys.argv[1])
        print("RESULTS", results, flush=True)
    """))
    with SimulatedHosts(3) as hosts, SshServers(hosts, ["h1", "h2"], client="h3", port=2222) as ssh:
        result = hosts.run("h3", [sys.executable, str(driver), ssh.key], timeout=120,
                           env=dict(os.environ, **QUIET_THREADS), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    said = [line for line in result.stdout.splitlines() if line.startswith("RESULTS ")]
    assert said == ["RESULTS [(0, 'h1', True), (1, 'h1', True), (2, 'h2', True), (3, 'h2', True)]"], \
        result.stdout[-3000:]


@pytest.mark.parametrize("network", sorted(NETWORK_LAYERS))
def test_tcp_only_jobs_run_across_hosts(tmp_path, network):
    """horovodrun's --tcp: the ranks are asked for TCP between hosts (hydra's by variables, for either of MPICH's
    network layers; Open MPI's by its transport options) and all-reduce correctly across two hosts that way."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import os, sys
        import numpy as np
        import hvdlite as hvd
        hvd.init()
        out = hvd.allreduce(np.arange(300000, dtype=np.float64) * (hvd.rank() + 1), name="x", op=hvd.Sum)
        right = bool(np.array_equal(out, np.arange(300000, dtype=np.float64) * 10))
        with open(os.path.join(sys.argv[1], f"rank{hvd.rank()}"), "w") as report:  # the hosts share the files
            print(hvd.rank(), right, os.environ["FI_PROVIDER"], os.environ["NCCL_IB_DISABLE"], file=report)
        hvd.shutdown()
    """))
    env = {name: value for name, value in dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS[network]).items()
           if name not in ("FI_PROVIDER", "UCX_TLS", "NCCL_IB_DISABLE")}  # what --tcp sets
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "--tcp",
                                  "-np", "4", "-H", "h1:2,h2:2", sys.executable, str(tmp_path / "job.py"),
                                  str(tmp_path)], timeout=120, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert [(tmp_path / f"rank{rank}").read_text() for rank in range(4)] == [
        f"{rank} True tcp 1\n" for rank in range(4)]


def test_output_files_of_ranks_on_other_hosts(tmp_path):
    """--output-filename: each rank's files are written on its own host (these share this machine's files, as hosts
    share a home directory), under the launcher's folder, made absolute where the launcher runs."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import socket, sys
        from mpi4py import MPI
        print(f"rank {MPI.COMM_WORLD.rank} on {socket.gethostname()}", flush=True)
        print(f"rank {MPI.COMM_WORLD.rank} complains", file=sys.stderr, flush=True)
    """))
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "-np", "4",
                                  "-H", "h1:2,h2:2", "--output-filename", "logs", sys.executable,
                                  str(tmp_path / "job.py")],
                           timeout=120, env=dict(os.environ, **QUIET_THREADS), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    for rank, host in enumerate(("h1", "h1", "h2", "h2")):
        folder = tmp_path / "logs" / f"rank.{rank}"
        assert (folder / "stdout").read_text() == f"rank {rank} on {host}\n"
        assert (folder / "stderr").read_text() == f"rank {rank} complains\n"
        assert f"rank {rank} on {host}" in result.stdout


def test_verbose_says_where_each_rank_runs_also_past_the_slots(tmp_path):
    """5 ranks on -H h1:2,h2:1: hydra deals the two beyond the slots out in turn, Open MPI spreads them evenly; what
    --verbose says is where each rank ran."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--verbose", "--launcher-exec",
                                  hosts.launcher_exec, "-np", "5", "-H", "h1:2,h2:1", sys.executable,
                                  str(tmp_path / "job.py"), str(tmp_path)],
                           timeout=120, env=dict(os.environ, **QUIET_THREADS), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    ran = {}
    for rank in range(5):
        number, host, *_ = (tmp_path / f"rank{rank}").read_text().split()
        ran.setdefault(host, []).append(int(number))
    said = {}
    for line in result.stdout.splitlines():
        if line.startswith("hvdliterun: h") and ": ranks " in line:
            host, ranks = line[len("hvdliterun: "):].split(": ranks ")
            said[host] = [int(r) for r in ranks.split(" (")[0].split(", ")]
    assert said == ran, result.stdout[-3000:]


ENDS_WITHIN_S = 30
TCP_BETWEEN_HOSTS = {**NETWORK_LAYERS["ofi"], "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm,tcp"}  # MPICH, Open MPI


@pytest.mark.parametrize("failure", ["a rank killed", "a host cut off"])
def test_a_failure_on_one_host_ends_the_job_on_every_host(tmp_path, failure):
    """Every rank started through the launcher: a rank killed on h2, or h2 cut off from the network (its
    processes alive, its connections silent: the progress timeout, and a rank telling the launcher over TCP at
    the address the launcher set), ends the job on every host within seconds and leaves no rank behind."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "loop.py").write_text(textwrap.dedent(LOOP))
    # Between hosts over TCP only: the simulated hosts share one kernel, where MPI's shared-memory transports would
    # still reach a host cut off from the network (hvdlite/testing/simulated_hosts.py).
    env = dict(os.environ, **QUIET_THREADS, **TCP_BETWEEN_HOSTS, HVDLITE_PROGRESS_TIMEOUT_SECONDS="5")
    with SimulatedHosts(3) as hosts:
        process = hosts.popen("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec,
                                     "-np", "4", "-H", "h1:2,h2:2", sys.executable, str(tmp_path / "loop.py"),
                                     str(tmp_path), "die" if failure == "a rank killed" else "loop"],
                              env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
        try:
            deadline = time.monotonic() + 90
            while not all((tmp_path / f"started{rank}").exists() for rank in range(4)):
                assert process.poll() is None or failure == "a rank killed", process.stdout.read()[-6000:]
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.2)
            started = time.monotonic()
            if failure == "a host cut off":
                hosts.set_link("h2", up=False)
            try:
                output, _ = process.communicate(timeout=ENDS_WITHIN_S)
            except subprocess.TimeoutExpired:
                hosts.kill_processes()
                process.kill()
                raise AssertionError(f"the job still ran {ENDS_WITHIN_S} s later:\n"
                                     + process.communicate()[0][-6000:]) from None
            took = time.monotonic() - started
            time.sleep(1)  # processes just killed may still be leaving
            left = {host: [pid for pid in hosts.pids(host) if host != "h2" or failure == "a rank killed"
                           or "loop.py" in command_line(pid)] for host in hosts.names}
        finally:
            hosts.set_link("h2", up=True)
            if process.poll() is None:
                process.kill()
            hosts.kill_processes()
    assert process.returncode != 0, output[-6000:]
    assert took < ENDS_WITHIN_S
    # Nothing is left on the hosts the launcher reaches. A host cut off from the network cannot be reached: its
    # ranks end themselves (the progress timeout); Open MPI's daemon there waits for its lost launcher's connection.
    assert not any(left.values()), f"processes left behind: {left}\n{output[-3000:]}"
    if failure == "a host cut off":
        assert "hvdliterun: a rank found a peer unreachable" in output, output[-3000:]


def test_an_elastic_job_restarts_after_a_rank_on_another_host_is_killed(tmp_path):
    """--max-restarts across the launcher: the last rank (on h2) is killed after the commit of step 10; the
    job starts again, every rank resumes from the same newest commit (each host keeps its own), and the result is
    exact: what 30 steps of sums of every rank's (rank + 1) x step make, computed here."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "elastic.py").write_text(textwrap.dedent(ELASTIC))
    env = dict(os.environ, **QUIET_THREADS, **TCP_BETWEEN_HOSTS,
               HVDLITE_ELASTIC_COMMIT_DIR=str(tmp_path / "commits" / "{host}"))  # the hosts share one file system
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec,
                                  "-np", "4", "-H", "h1:2,h2:2", "--max-restarts", "1", sys.executable,
                                  str(tmp_path / "elastic.py"), str(tmp_path)],
                           timeout=180, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert "hvdliterun: restart 1: the job failed" in result.stdout, result.stdout[-4000:]
    check_elastic_restart(tmp_path)
    assert not any((tmp_path / "commits").glob("*/commit-*")), "the finished job left its commits"


def test_a_failed_elastic_job_without_restarts_has_its_commits_removed_on_both_hosts(tmp_path):
    """hvd.elastic in a job launched without --max-restarts, failing after a commit on each host: the ranks on h1
    and h2 tell the launcher on h3 that they hold commits, and it removes them there (no later start could find
    them), on disk and in memory."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    before = commit_folders_here()
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec,
                                  "-np", "2", "-H", "h1:1,h2:1", sys.executable, GIVEN_UP, "fail"],
                           timeout=120, env=dict(os.environ, **QUIET_THREADS), cwd=str(tmp_path))
    output = result.stdout
    assert result.returncode == 3, output[-6000:]
    assert output.count("STEP") == 2 and "hvdliterun: removed the job's commits on 2 hosts" in output, output[-4000:]
    # The simulated hosts share this machine's file systems (and the job's default folders): the job's are gone.
    assert commit_folders_here() == before, "the failed job left its commits"


def test_a_decoy_interface_on_every_host_is_kept_out_by_network_interface(tmp_path):
    """Every host has a second interface, up, with the same address on each, as docker0 has on Docker hosts: left
    to itself, MPI takes it for a way to the other hosts and the job never gets going. MPICH's ranks wait in
    MPI_Init for each other: the launcher ends the job once --start-timeout (8 s) has passed, saying to name the
    interface; Open MPI's daemons cannot call back, and the job does not finish within 20 s. With
    --network-interface eth0 it runs at once, every rank on its host, all-reducing exactly."""
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = dict(os.environ, **QUIET_THREADS, **TCP_BETWEEN_HOSTS)
    open_mpi = detect_flavour(find_mpiexec(None)) == OPENMPI
    launch = [venv_tool("hvdliterun"), "--launcher-exec", None, "-np", "4", "-H", "h1:2,h2:2"]
    job = [sys.executable, str(tmp_path / "job.py"), str(tmp_path)]
    with SimulatedHosts(3, decoy="docker0") as hosts:
        launch[2] = hosts.launcher_exec
        kept = hosts.run("h3", [*launch, "--network-interface", "eth0", *job], timeout=120, env=env,
                         cwd=str(tmp_path))
        assert kept.returncode == 0, kept.stdout[-6000:]
        seen = [(tmp_path / f"rank{rank}").read_text().split()[:5] for rank in range(4)]
        assert [report[1] for report in seen] == ["h1", "h1", "h2", "h2"] and all(
            report[4] == "True" for report in seen), seen
        started = time.monotonic()
        try:
            left = hosts.run("h3", [*launch, "--start-timeout", "8", *job], timeout=20 if open_mpi else 60, env=env,
                             cwd=str(tmp_path))
        except TimeoutError:
            left = None
        assert left is None or left.returncode != 0, "the decoy interface did not get in the way: this shows nothing"
        if not open_mpi:
            assert left is not None and time.monotonic() - started < 30, "the launcher let the job wait in MPI_Init"
            assert "every rank began MPI's start-up and 4 of 4 have not got through it 8 s later" in left.stdout \
                and "--network-interface eth0" in left.stdout, left.stdout[-3000:]
