"""hvdliterun's report port (hvdlite/runner/report_port.py): the ranks tell the launcher that a peer is
unreachable, that they committed, that they start MPI; anything else that connects, without the secret the launcher
hands its ranks, can neither end nor alter the job, and is logged. A one-host job listens on the loopback address
only. (From another simulated host: hosts/test_multihost.py.)"""
import os
import socket
import subprocess
import sys
import time

from harness.forged_reports import FORGED, WAITING_JOB, forge, launcher_port
from harness.processes import QUIET_THREADS, read_until, venv_tool, with_hvdlite_importable
from hvdlite.runner.report_port import listen_for_ranks
from hvdlite.runner.protocol import COMMITTED, LAUNCHER_VARIABLE, SECRET_VARIABLE, tell_launcher

SECRET = "5ec2e7" * 5 + "00"


def start_waiting_job(tmp_path, *mode):
    script = tmp_path / "job.py"
    script.write_text(WAITING_JOB)
    go = tmp_path / "go"
    env = with_hvdlite_importable(dict(os.environ, **QUIET_THREADS))
    process = subprocess.Popen([venv_tool("hvdliterun"), "-np", "2", sys.executable, str(script), str(go), *mode],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    seen = read_until(process, "LAUNCHER ", 1, "rank 0 naming the launcher's port")
    line = next(line for line in seen.splitlines() if line.startswith("LAUNCHER "))
    return process, go, launcher_port(line), seen


def finish(process, seen, timeout=60):
    try:
        rest, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        raise AssertionError(f"the job still ran {timeout} s later:\n{seen}") from None
    return seen + rest


def listening_addresses(port):
    """The local addresses of this network namespace's TCP sockets listening on port (/proc/net/tcp, tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as stream:
            for row in list(stream)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


def test_reports_without_the_secret_neither_end_nor_alter_a_job_and_are_logged(tmp_path):
    process, go, port, seen = start_waiting_job(tmp_path)
    assert listening_addresses(port) == ["0100007F"], "a one-host job's report port listens beyond loopback"
    forge("127.0.0.1", port)
    time.sleep(1)
    assert process.poll() is None, "a forged report ended the job"
    go.touch()
    output = finish(process, seen)
    assert process.returncode == 0, output[-4000:]
    assert "SUM 0 3" in output and "SUM 1 3" in output, output[-4000:]
    assert output.count("ignored a connection to the report port from 127.0.0.1") == len(FORGED), output[-4000:]


def test_the_ranks_reports_are_still_heard_after_forged_ones(tmp_path):
    """A forged 'end' (what the launcher sends its own port as a job ends) does not stop it listening: a rank's
    report of an unreachable peer, made with the secret after the forged ones, still ends the job."""
    process, go, port, seen = start_waiting_job(tmp_path, "then-report")
    forge("127.0.0.1", port)
    go.touch()
    started = time.monotonic()
    output = finish(process, seen)
    assert process.returncode != 0, output[-4000:]
    assert "a rank found a peer unreachable" in output, output[-4000:]
    assert time.monotonic() - started < 20, output[-4000:]


def test_only_lines_with_the_secret_are_handed_on():
    heard, logged = [], []
    port, close = listen_for_ranks(heard.append, SECRET, log=logged.append)
    environ = {LAUNCHER_VARIABLE: f"{socket.gethostname()}:1:1:{port}", SECRET_VARIABLE: SECRET}
    forge("127.0.0.1", port)
    assert tell_launcher(COMMITTED, environ)
    assert not tell_launcher(COMMITTED, dict(environ, **{SECRET_VARIABLE: ""})), "sent a report without a secret"
    assert tell_launcher("hello", environ)  # with the secret, but no report the launcher knows
    close()
    assert heard == [COMMITTED]
    assert len([m for m in logged if "did not give the job's secret" in m]) == len(FORGED), logged
    assert any("ignored an unknown report" in m and "hello" in m for m in logged), logged
