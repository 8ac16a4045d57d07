"""hvdliterun across hosts, as a user runs it: jobs on simulated hosts (hvdlite/testing/simulated_hosts.py: network
namespaces, TCP between them, a hostname each; needs root) over both of MPICH's network layers.

Ranks land where -H or --hostfile puts them (blocks or round-robin) and know their host; a misspelled or
unreachable host is reported within seconds, naming it, instead of a hang; --verbose shows each host's ranks; a
rank killed, or every process of a host, ends the job on every host within 30 s and leaves nothing behind, and so
does a host cut off from the network (its processes alive, its connections silent: the progress timeout), while a
rank that computes for longer than that timeout is no failure. A rank killed in the middle of an all-reduce that
crosses hosts by hvdlite's own TCP ring ends the job as fast. Reports sent to the launcher's port from another
host without the job's secret neither end nor alter the job.

The multi-rank tests themselves also run across these hosts: pytest --hosts 2x2 (harness/multirank.py).
"""
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from harness.forged_reports import FORGED, WAITING_JOB, launcher_port
from harness import job_ends
from harness.processes import QUIET_THREADS, TESTS_DIR, read_until, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, expected_topology, hosts_for_tests

pytestmark = pytest.mark.simulated_hosts

ENDS_WITHIN_S = 30

JOB = """
import os, signal, socket, sys, threading, time
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
x = np.arange(1000, dtype=np.float64) * (rank + 1)
out = hvd.allreduce(x, name="x", op=hvd.Sum)
assert np.array_equal(out, np.arange(1000) * size * (size + 1) / 2), out[:4]
big = hvd.allreduce(np.full(1 << 20, rank + 1.0, dtype=np.float32), name="big", op=hvd.Sum)
assert np.all(big == size * (size + 1) / 2), big[:4]
print(f"RANK {rank} host={socket.gethostname()} local={hvd.local_rank()}/{hvd.local_size()} "
      f"cross={hvd.cross_rank()}/{hvd.cross_size()}", flush=True)
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "pause":  # rank 0 computes for longer than the progress timeout while the others wait on it
    for step in range(10):
        if rank == 0 and step == 5:
            time.sleep(8)
        out = hvd.allreduce(np.full(4096, 1.0, dtype=np.float32), name="paused", op=hvd.Sum)
        assert np.all(out == size), out[:4]
    print(f"PAUSED OK {rank}", flush=True)
elif mode:
    print(f"LOOPING {rank}", flush=True)
    step = 0
    # 16 KiB a step goes by MPI; 8 MiB (mode "die-in-ring") by the ring across hosts over its TCP connections.
    elements = 1 << 21 if mode == "die-in-ring" else 4096
    while True:  # until a rank dies (the last rank, after 20 steps) or the test kills a host
        if mode == "die-in-ring" and rank == size - 1 and step == 20:
            # Killed a moment into the all-reduce: the other hosts' ring waits on its connections.
            threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGKILL)).start()
        hvd.allreduce(np.full(elements, 1.0, dtype=np.float32), name="step", op=hvd.Sum)
        step += 1
        if mode == "die" and rank == size - 1 and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
hvd.shutdown()
"""


@pytest.fixture(scope="module")
def hosts():
    with hosts_for_tests(2, "the multi-host tests") as made:
        yield made


@pytest.fixture
def job_script(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(JOB))
    return str(path)


def environment(network):
    env = dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS[network])
    return env


def hvdliterun(hosts, *arguments):
    return [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, *arguments]


def ranks_seen(output):
    """{rank: {"host": ..., "local": "l/L", "cross": "c/C"}} from the job's RANK lines."""
    # Ranks' lines may interleave in the job's output: match each report wherever it is.
    found = re.findall(r"RANK (\d+) host=(\w+) local=(\d+/\d+) cross=(\d+/\d+)", output)
    return {int(rank): {"host": host, "local": local, "cross": cross} for rank, host, local, cross in found}


@pytest.mark.parametrize("network", sorted(NETWORK_LAYERS))
@pytest.mark.parametrize("where,hostfile,placement", [
    (["-H", "h1:2,h2:2"], None, "blocks"),
    (["--hostfile"], "h1:1\nh2:1\n", "round-robin"),
    (["--hostfile"], "h1 slots=2  # Horovod's spelling\nh2 slots=2\n", "blocks"),
], ids=["-H blocks", "hostfile round-robin", "hostfile slots"])
def test_ranks_run_where_the_host_list_puts_them(hosts, job_script, tmp_path, network, where, hostfile, placement):
    if hostfile:
        (tmp_path / "hostfile").write_text(hostfile)
        where = where + [str(tmp_path / "hostfile")]
    result = hosts.run("h1", hvdliterun(hosts, "-np", "4", *where, sys.executable, job_script), timeout=120,
                       env=environment(network), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    expected = {}
    for rank in range(4):
        at = expected_topology(rank, 2, 2, placement)
        expected[rank] = {"host": at["host"], "local": f"{at['local_rank']}/{at['local_size']}",
                          "cross": f"{at['cross_rank']}/{at['cross_size']}"}
    assert ranks_seen(result.stdout) == expected, result.stdout


def test_verbose_shows_the_mpiexec_command_and_each_hosts_ranks(hosts, job_script, tmp_path):
    result = hosts.run("h1", hvdliterun(hosts, "--verbose", "-np", "3", "-H", "h1:2,h2:1", sys.executable, job_script),
                       timeout=120, env=environment("ofi"), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert f"-launcher-exec {hosts.launcher_exec} -hosts h1:2,h2:1" in result.stdout, result.stdout
    assert "hvdliterun: h1: ranks 0, 1 (this host)" in result.stdout, result.stdout
    assert f"hvdliterun: h2: ranks 2 (started through `{hosts.launcher_exec} h2 ...`)" in result.stdout, result.stdout


def test_a_misspelled_host_is_reported_within_seconds(hosts, job_script, tmp_path):
    started = time.monotonic()
    result = hosts.run("h1", hvdliterun(hosts, "-np", "2", "-H", "h1:1,h22:1", sys.executable, job_script),
                       timeout=60, env=environment("ofi"), cwd=str(tmp_path))
    took = time.monotonic() - started
    assert result.returncode == 2, result.stdout
    assert "host 'h22' does not resolve" in result.stdout and "spelled" in result.stdout, result.stdout
    assert took < 10, f"took {took:.1f} s"


def test_an_unreachable_host_is_reported_within_seconds(hosts, job_script, tmp_path):
    hosts.set_link("h2", up=False)
    try:
        started = time.monotonic()
        result = hosts.run("h1", hvdliterun(hosts, "-np", "2", "-H", "h1:1,h2:1", sys.executable, job_script),
                           timeout=60, env=environment("ofi"), cwd=str(tmp_path))
        took = time.monotonic() - started
    finally:
        hosts.set_link("h2", up=True)
    assert result.returncode == 2, result.stdout
    assert "host 'h2' is unreachable" in result.stdout and "Connection timed out" in result.stdout, result.stdout
    assert took < 15, f"took {took:.1f} s"


def start_looping_job(hosts, job_script, tmp_path, network, mode):
    command = hvdliterun(hosts, "-np", "4", "-H", "h1:2,h2:2", sys.executable, job_script, mode)
    return job_ends.start_until_every_rank_says(hosts, command, 4, "LOOPING", environment(network), str(tmp_path), 90)


def wait_for_the_end(hosts, process, lines, started):
    return job_ends.wait_for_the_end(hosts, process, lines, started, ENDS_WITHIN_S)


@pytest.mark.parametrize("network,mode", [(network, "die") for network in sorted(NETWORK_LAYERS)] + [("ofi", "die-in-ring")])
def test_a_killed_rank_ends_the_job_on_every_host(hosts, job_script, tmp_path, network, mode):
    process, lines = start_looping_job(hosts, job_script, tmp_path, network, mode)
    took, output = wait_for_the_end(hosts, process, lines, time.monotonic())
    assert took < ENDS_WITHIN_S


@pytest.mark.parametrize("network", sorted(NETWORK_LAYERS))
def test_a_killed_host_ends_the_job_on_every_host(hosts, job_script, tmp_path, network):
    process, lines = start_looping_job(hosts, job_script, tmp_path, network, "loop")
    started = time.monotonic()
    hosts.kill_processes("h2")  # every process of the host: its MPI proxy and its ranks
    took, output = wait_for_the_end(hosts, process, lines, started)
    assert took < ENDS_WITHIN_S


@pytest.mark.parametrize("network", sorted(NETWORK_LAYERS))
def test_a_host_cut_off_from_the_network_ends_the_job_on_every_host(hosts, job_script, tmp_path, network,
                                                                    monkeypatch):
    # Nothing closes the connections: without the progress timeout every rank would wait for TCP to give up.
    monkeypatch.setenv("HVDLITE_PROGRESS_TIMEOUT_SECONDS", "5")
    process, lines = start_looping_job(hosts, job_script, tmp_path, network, "loop")
    started = time.monotonic()
    hosts.set_link("h2", up=False)
    try:
        took, output = wait_for_the_end(hosts, process, lines, started)
    finally:
        hosts.set_link("h2", up=True)
    assert took < ENDS_WITHIN_S
    assert "no progress for" in output and "a peer is unreachable" in output, output[-3000:]
    assert "hvdliterun: a rank found a peer unreachable" in output, output[-3000:]
    assert output.count("a rank found a peer unreachable") == 1, output[-3000:]


def test_a_rank_computing_longer_than_the_progress_timeout_is_no_failure(hosts, job_script, tmp_path, monkeypatch):
    monkeypatch.setenv("HVDLITE_PROGRESS_TIMEOUT_SECONDS", "3")
    result = hosts.run("h1", hvdliterun(hosts, "-np", "4", "-H", "h1:2,h2:2", sys.executable, job_script, "pause"),
                       timeout=120, env=environment("ofi"), cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert result.stdout.count("PAUSED OK") == 4, result.stdout[-6000:]


def test_reports_from_another_host_without_the_secret_neither_end_nor_alter_the_job(hosts, tmp_path):
    script, go = tmp_path / "job.py", tmp_path / "go"
    script.write_text(WAITING_JOB)
    process = hosts.popen("h1", hvdliterun(hosts, "-np", "2", "-H", "h1:1,h2:1", sys.executable, str(script), str(go)),
                          env=environment("ofi"), cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
    try:
        seen = read_until(process, "LAUNCHER ", 1, "rank 0 naming the launcher's port")
        port = launcher_port(next(line for line in seen.splitlines() if line.startswith("LAUNCHER ")))
        forger = hosts.run("h2", [sys.executable, "-c", f"import sys; sys.path.insert(0, {TESTS_DIR!r}); "
                                  f"from harness.forged_reports import forge; forge('h1', {port})"],
                           timeout=60, env=environment("ofi"))
        assert forger.returncode == 0, forger.stdout
        time.sleep(1)
        assert process.poll() is None, "a forged report ended the job"
        go.touch()
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            hosts.kill_processes()
    output = seen + rest
    assert process.returncode == 0, output[-4000:]
    assert "SUM 0 3" in output and "SUM 1 3" in output, output[-4000:]
    ignored = f"ignored a connection to the report port from {hosts.address('h2')}"
    assert output.count(ignored) == len(FORGED), output[-4000:]
