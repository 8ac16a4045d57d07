"""Elastic training across simulated hosts (hvdlite/testing/simulated_hosts.py; needs root), the launcher on a third host:
losing rank 0's host, every process killed and its network and commits gone with it, the launcher blacklists it
and the job resumes on the remaining host from that host's copy of the last commit; and a host the discovery
script drops, then lists again: the job shrinks and grows at commits, without failing."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from harness.elastic_folders import commit_folders_here
from harness.processes import QUIET_THREADS, TESTS_DIR, venv_tool
from hvdlite.testing.simulated_hosts import SimulatedHosts, available
from hvdlite.runner import commit_folders

pytestmark = pytest.mark.simulated_hosts

WORKER = os.path.join(TESTS_DIR, "elastic", "workers", "torch_train.py")
GIVEN_UP = os.path.join(os.path.dirname(WORKER), "given_up.py")


def wait_for_steps(path, count, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split("\n")) > count:
            return
        if process.poll() is not None:
            raise AssertionError("the job ended early:\n" + process.stdout.read()[-6000:])
        time.sleep(0.2)
    raise AssertionError(f"no {count} steps within {timeout} s")


def start_job(hosts, tmp_path, name, *launcher_args, epochs):
    """The torch elastic worker under hvdliterun on h3 (ranks on h1 and h2, as the discovery file lists), each host
    keeping its commits apart; returns the running process."""
    env = dict(os.environ, **QUIET_THREADS, HVDLITE_PROGRESS_TIMEOUT_SECONDS="5",
               HVDLITE_ELASTIC_COMMIT_DIR=str(tmp_path / "commits" / "{host}"))
    command = [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "--min-np", "1", "--max-np", "2",
               "--host-discovery-script", f"cat {tmp_path / 'hosts'}", *launcher_args, sys.executable, WORKER,
               "--out", str(tmp_path / name), "--epochs", str(epochs), "--step-seconds", "0.1"]  # news takes up to 2 s
    return hosts.popen("h3", command, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, start_new_session=True)


def finish(hosts, process, timeout=150):
    """The job's output once it ended (killing it, and failing, if it runs past timeout)."""
    try:
        return process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        hosts.kill_processes()
        process.kill()
        raise AssertionError("the job did not finish:\n" + process.communicate()[0][-6000:]) from None


def starts_of(path):
    """A worker log's lines as sorted tuples of ints (.resumed: restart, rank, size, epoch, step of each rank's
    start; .resets: restart, rank, size of each reset callback)."""
    return sorted(tuple(map(int, line.split())) for line in path.read_text().split("\n")[:-1])


def test_losing_rank_0s_host_resumes_on_the_other_from_its_commit(tmp_path):
    problem = available()
    if problem:
        pytest.fail(f"the elastic multi-host test needs simulated hosts: {problem}")
    (tmp_path / "hosts").write_text("h1:1\nh2:1\n")
    with SimulatedHosts(3) as hosts:
        process = start_job(hosts, tmp_path, "lost", "--elastic-timeout", "60", epochs=1)
        try:
            wait_for_steps(tmp_path / "lost.samples", 40, process)  # 20 steps, a line per rank each
            hosts.kill_processes("h1")  # rank 0's host: its ranks, its MPI proxy ...
            logged = [int(line.split()[1]) for line in (tmp_path / "lost.samples").read_text().split("\n")[:-1]]
            hosts.set_link("h1", up=False)  # ... its network ...
            shutil.rmtree(tmp_path / "commits" / "h1")  # ... its disk and its memory
            lost_folder = {"HVDLITE_ELASTIC_COMMIT_DIR": str(tmp_path / "commits" / "h1")}
            shutil.rmtree(commit_folders.memory_directory(lost_folder))
            output = finish(hosts, process)
        finally:
            if process.poll() is None:
                hosts.kill_processes()
                process.kill()
            hosts.set_link("h1", up=True)
    assert process.returncode == 0, output[-6000:]
    restarts = [line for line in output.splitlines() if line.startswith("hvdliterun: restart")]
    assert len(restarts) == 1 and "hosts h1 unreachable and blacklisted" in restarts[0], output[-4000:]
    starts = starts_of(tmp_path / "lost.resumed")
    assert [s[:3] for s in starts] == [(0, 0, 2), (0, 1, 2), (1, 0, 1)], starts
    # A commit every step: the job resumes at the last step trained before the loss, give or take the step in flight
    # as the log was read (h2 may finish the step both ranks had all-reduced; rank 0 may have logged one h2 had
    # not committed).
    assert max(logged) - 1 <= starts[2][4] <= max(logged) + 1, (starts, max(logged))
    assert (tmp_path / "lost").exists(), "the job finished on the remaining host"


def test_a_host_dropped_then_added_back_shrinks_and_grows_the_job(tmp_path):
    """The discovery script stops listing h2, then lists it again: the job stops at a commit each time and goes on
    at 1 rank, then 2, with reset callbacks, every sample of each epoch trained once."""
    problem = available()
    if problem:
        pytest.fail(f"the elastic multi-host test needs simulated hosts: {problem}")
    discovery = tmp_path / "hosts"
    discovery.write_text("h1:1\nh2:1\n")
    with SimulatedHosts(3) as hosts:
        process = start_job(hosts, tmp_path, "resized", epochs=2)
        try:
            wait_for_steps(tmp_path / "resized.samples", 20, process)  # 10 steps on 2 ranks
            discovery.write_text("h1:1\n")  # h2 is to be taken away
            wait_for_steps(tmp_path / "resized.resumed", 3, process)  # the 1-rank start
            wait_for_steps(tmp_path / "resized.samples", 60, process)
            discovery.write_text("h1:1\nh2:1\n")  # and is back
            output = finish(hosts, process)
        finally:
            if process.poll() is None:
                hosts.kill_processes()
                process.kill()
    assert process.returncode == 0, output[-6000:]
    restarts = [line for line in output.splitlines() if line.startswith("hvdliterun: restart")]
    assert restarts == [f"hvdliterun: restart {n}: the hosts changed; starting again on them from the last commit"
                        for n in (1, 2)], output[-4000:]
    starts = starts_of(tmp_path / "resized.resumed")
    assert [s[:3] for s in starts] == [(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 2), (2, 1, 2)], starts
    resets = starts_of(tmp_path / "resized.resets")
    assert resets == [(1, 0, 1), (2, 0, 2), (2, 1, 2)], resets
    seen = {}
    for line in (tmp_path / "resized.samples").read_text().split("\n")[:-1]:
        epoch, _step, _rank, ids = line.split()
        seen.setdefault(int(epoch), []).extend(map(int, ids.split(",")))
    assert sorted(seen) == [0, 1]
    for epoch, ids in seen.items():
        assert set(ids) == set(range(1792)), f"epoch {epoch} skipped samples"
        assert len(ids) - 1792 <= 1, f"epoch {epoch} repeated {len(ids) - 1792} samples"


def test_a_job_given_up_has_its_commits_removed_on_every_host(tmp_path):
    """A job that fails at every start, launched from h3 onto h1 and h2, given up at --reset-limit: the launcher
    removes the job's commits on both hosts (through mpiexec, as it started the job), on disk and in memory."""
    problem = available()
    if problem:
        pytest.fail(f"the elastic multi-host test needs simulated hosts: {problem}")
    (tmp_path / "hosts").write_text("h1:1\nh2:1\n")
    before = commit_folders_here()
    env = dict(os.environ, **QUIET_THREADS, HVDLITE_PROGRESS_TIMEOUT_SECONDS="5")
    with SimulatedHosts(3) as hosts:
        done = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "--min-np", "2",
                                "--host-discovery-script", f"cat {tmp_path / 'hosts'}", "--reset-limit", "1",
                                sys.executable, GIVEN_UP, "fail"], timeout=150, env=env, cwd=str(tmp_path))
    output = done.stdout
    assert done.returncode == 3, output[-6000:]
    assert "hvdliterun: the job ended with exit code 3 after 1 restarts, the --reset-limit" in output, output[-4000:]
    assert "hvdliterun: removed the job's commits on 2 hosts" in output, output[-4000:]
    # The simulated hosts share this machine's file systems (and the job's default folders): the job's are gone.
    assert commit_folders_here() == before, "the job given up left its commits"
