"""Runs the mpiexec command: forwards SIGINT/SIGTERM to it, passes its exit code on, and leaves no process behind;
hears what the ranks report to the launcher (report_port.py).

hydra starts its proxies and the ranks each in a session of their own, so killing mpiexec's process group does
not reach them. Every process of the job instead carries JOB_MARKER=<id> in its environment (set on mpiexec,
inherited by proxies and ranks), and after mpiexec ends any local process still carrying it is killed.
"""
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import NamedTuple

from . import start_watch
from .protocol import COMMITTED, JOB_MARKER, LAUNCHER_VARIABLE, PEER_UNREACHABLE, SECRET_VARIABLE
from .report_port import LOOPBACK, listen_for_ranks

KILL_GRACE_SECONDS = 10.0  # after a forwarded signal, how long mpiexec may take to bring the ranks down
OUTPUT_GRACE_SECONDS = 2.0  # after a rank's SIGUSR1: time for mpiexec to pass on the rank's last words
# A rank whose peer vanished without closing its connections (progress_watchdog.h) tells the launcher before it
# exits, by SIGUSR1 on this host and by a line to its port (protocol.py) from any other: mpiexec itself would
# wait forever for the unreachable host's proxy.
UNREACHABLE_SIGNAL = signal.SIGUSR1
REPORTS = (PEER_UNREACHABLE, COMMITTED)  # the reports an Outcome collects
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the launcher is told to stop: forwarded to the job


class Outcome(NamedTuple):
    """How a job run by run_job ended."""
    code: int  # the exit code to exit with
    interrupted: bool  # the launcher was told to stop (STOP_SIGNALS): nothing may start again
    reports: frozenset  # what the ranks reported (REPORTS)


def launcher_identity(port):
    """'host:pid:start time:port' of this process (its start time in clock ticks, /proc/PID/stat field 22, which a
    rank checks before it signals, so that a reused pid never receives it)."""
    with open("/proc/self/stat", "rb") as stream:
        start_time = stream.read().rsplit(b")", 1)[1].split()[19].decode()
    return f"{socket.gethostname()}:{os.getpid()}:{start_time}:{port}"


def new_job_id():
    return uuid.uuid4().hex


def processes_of_job(job_id):
    """PIDs of live local processes whose environment carries JOB_MARKER=job_id (zombies excluded)."""
    return processes_with_environment(JOB_MARKER, job_id)


def processes_with_environment(name, value):
    """PIDs of live local processes (zombies excluded, this one too) whose environment has name=value."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as stream:
                if needle not in stream.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as stream:
                state = stream.read().rsplit(b")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def kill_job_leftovers(job_id, log=None):
    """SIGKILLs what is left of the job on this host; returns the PIDs it found."""
    leftovers = processes_of_job(job_id)
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if leftovers and log:
        log(f"killed {len(leftovers)} leftover process(es) of the job: {leftovers}")
    return leftovers


def _warn(message):
    print(f"hvdliterun: {message}", file=sys.stderr, flush=True)


def exit_code(returncode):
    """A shell-style exit code: a process killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _end_with_parent():
    """In the child before exec: SIGTERM when the launcher dies, even by SIGKILL (mpiexec then ends the ranks)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def run_job(argv, env, job_id, log=None, timeout=None, ranks=None, start_timeout=start_watch.DEFAULT_SECONDS,
            listen_on=(LOOPBACK,)):
    """Runs argv with env (JOB_MARKER added) to the end, or ends it after timeout seconds (exit code 124); returns its
    Outcome. With ``ranks`` (the job's size), a job whose ranks all began MPI's start-up but did not all get
    through it within start_timeout seconds is ended (exit code 1, start_watch.py). The ranks' reports are heard
    on the addresses ``listen_on`` (report_addresses)."""
    received = []  # the signals received
    reports = set()
    never_started = threading.Event()  # the start watch ended the job

    def stuck(left):
        if never_started.is_set():
            return
        never_started.set()
        print(f"hvdliterun: every rank began MPI's start-up and {left} of {ranks} have not got through it "
              f"{start_timeout:g} s later: the ranks cannot reach each other. Where hosts have several network "
              "interfaces, name the one that reaches the other hosts (--network-interface eth0); check that no "
              "firewall stands between them. Ending the job (--start-timeout sets the time)", file=sys.stderr,
              flush=True)
        end_job()
    watch = start_watch.StartWatch(ranks, start_timeout, stuck) if ranks and start_timeout else None

    def on_report(report):
        if report in REPORTS:
            reports.add(report)
        if report == PEER_UNREACHABLE:
            peer_unreachable(None, None)
        started = start_watch.parse(report)
        if started and watch:
            watch.heard(*started)
    secret = secrets.token_hex(16)
    port, stop_listening = listen_for_ranks(on_report, secret, listen_on, log=_warn)
    env = dict(env, **{JOB_MARKER: job_id, LAUNCHER_VARIABLE: launcher_identity(port), SECRET_VARIABLE: secret})
    # Own session: a Ctrl-C in the terminal reaches only us, and we forward it exactly once.
    process = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_end_with_parent)

    def end_job(why=None):
        if process.poll() is None:
            if log and why:
                log(why)
            process.kill()
        kill_job_leftovers(job_id, log)

    def hard_kill():
        end_job(f"mpiexec did not end {KILL_GRACE_SECONDS:g} s after the signal; killing the job")

    def peer_unreachable(_signum, _frame):
        if UNREACHABLE_SIGNAL in received:  # every rank on this host may send it
            return
        received.append(UNREACHABLE_SIGNAL)
        print("hvdliterun: a rank found a peer unreachable (see its error); ending the job", file=sys.stderr,
              flush=True)
        # Not at once: the rank's error is still on its way through mpiexec, which would die with it.
        timer = threading.Timer(OUTPUT_GRACE_SECONDS, end_job)
        timer.daemon = True
        timer.start()

    def forward(signum, _frame):
        received.append(signum)
        if len(received) > 1:  # a second signal: stop waiting
            hard_kill()
            return
        if process.poll() is None:
            process.send_signal(signum)  # hydra and Open MPI pass it to the ranks and clean up
        timer = threading.Timer(KILL_GRACE_SECONDS, hard_kill)
        timer.daemon = True
        timer.start()

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    previous[UNREACHABLE_SIGNAL] = signal.signal(UNREACHABLE_SIGNAL, peer_unreachable)
    timed_out = False
    try:
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            end_job(f"the job did not end within {timeout:g} s; killing it")
            returncode = process.wait()
    finally:
        stop_listening()
        if watch:
            watch.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # A rank may still be exiting (or hydra left one behind): give it a moment, then make sure.
    deadline = time.monotonic() + 1.0
    while processes_of_job(job_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    kill_job_leftovers(job_id, log)
    stopped = [signum for signum in received if signum in STOP_SIGNALS]
    if UNREACHABLE_SIGNAL in received or never_started.is_set():
        code = 1
    elif timed_out:
        code = 124  # as timeout(1)
    elif stopped and returncode == 0:
        code = 128 + stopped[0]
    else:
        code = exit_code(returncode)
    return Outcome(code, bool(stopped), frozenset(reports))
