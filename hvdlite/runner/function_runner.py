"""``hvdlite.run(func, args=(), kwargs=None, num_proc=1, ...)``: horovod.run, the launcher as a function. Runs
``func(*args, **kwargs)`` on every rank of a job started by hvdliterun and returns what each rank returned, as a
list indexed by rank (from a notebook, a test, a driver program).

The function and its arguments travel as a cloudpickle (a function defined in a notebook or a script's
``__main__`` is pickled by value). This process listens on a TCP port of its own: every rank
(``python -m hvdlite.runner.function_worker``, run as any Python rank so that a raising rank ends the job) asks it
for the function, calls it, and sends back the return value or its traceback; ranks on other hosts reach it by this
host's name, as they reach the launcher. A connection must first give the job's secret, so that nothing else can
hand this process a pickle to load. An elastic run (``min_num_proc``/``max_num_proc``) restarts as hvdliterun
restarts it; the results are those of the last start.
"""
import datetime
import hmac
import os
import pickle
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import warnings

from .hosts import read_hostfile
from .job import KILL_GRACE_SECONDS
from .protocol import FUNCTION_ADDRESS_VARIABLE, FUNCTION_SECRET_VARIABLE

FETCH, RESULT = "function", "result"
_LENGTH = struct.Struct("<Q")
_ACCEPTED = b"ok"


def send_block(connection, data):
    connection.sendall(_LENGTH.pack(len(data)) + data)


def receive_block(connection):
    (length,) = _LENGTH.unpack(_receive_exactly(connection, _LENGTH.size))
    return _receive_exactly(connection, length)


def _receive_exactly(connection, count):
    chunks = []
    while count:
        chunk = connection.recv(min(count, 1 << 20))
        if not chunk:
            raise ConnectionError("the other end closed the connection early")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def request_line(secret, verb, rank, start):
    return f"{secret} {verb} {rank} {start}\n".encode()


class RankFailed(RuntimeError):
    """A rank's function raised: the message holds its traceback."""


class _Exchange:
    """The caller's side: hands out the function, takes the results (the latest start's, per rank)."""

    def __init__(self, payload):
        self.payload = payload
        self.secret = secrets.token_hex(16)
        self.results = {}  # rank -> (start, kind, value)
        self._lock = threading.Lock()
        self._closing = False
        self._server = socket.create_server(("", 0))
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="hvdlite-run-function", daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            if self._closing:
                connection.close()
                return
            with connection:
                try:
                    connection.settimeout(60)
                    self._handle(connection)
                except (OSError, ValueError, ConnectionError, pickle.UnpicklingError, EOFError):
                    pass  # a broken or foreign connection: its rank, if any, fails and says so itself

    def _handle(self, connection):
        line = b""
        while not line.endswith(b"\n") and len(line) < 200:
            chunk = connection.recv(1)
            if not chunk:
                return
            line += chunk
        secret, verb, rank, start = line.decode().split()
        if not hmac.compare_digest(secret, self.secret):
            return
        if verb == FETCH:
            send_block(connection, self.payload)
        elif verb == RESULT:
            rank, start = int(rank), int(start)
            kind, value = pickle.loads(receive_block(connection))
            with self._lock:
                if rank not in self.results or self.results[rank][0] <= start:
                    self.results[rank] = (start, kind, value)
            connection.sendall(_ACCEPTED)

    def close(self):
        # A socket closed in one thread does not wake accept() in another: a last connection does. Every rank has
        # had its result taken by now (each waits for the answer before it ends, and the job has ended).
        self._closing = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
        except OSError:
            pass
        self._thread.join(timeout=10)
        self._server.close()


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:
        raise ImportError("hvdlite.run(func, ...) pickles func with cloudpickle: pip install cloudpickle") from None
    return cloudpickle


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, executable=None, np=None, min_np=None, max_np=None):
    """Runs ``func(*args, **kwargs)`` on ``num_proc`` ranks and returns their return values, index = rank.

    horovod.run's arguments, meaning what hvdliterun's flags of those names mean; ``min_num_proc`` or
    ``max_num_proc`` make the run elastic on the hosts given (this host's ``num_proc`` slots by default).
    ``disable_cache`` changes nothing (hvdliterun's checks run every time); ``use_gloo`` is refused.
    Raises RankFailed with a rank's traceback when its function raised, RuntimeError when the job failed otherwise.
    """
    num_proc, min_num_proc, max_num_proc = _renamed(num_proc, np, min_num_proc, min_np, max_num_proc, max_np)
    given = dict(locals())  # run's arguments, for hvdliterun's command line
    if use_gloo:
        raise ValueError("use_gloo: hvdlite runs on MPI only")
    if hosts is not None and hostfile is not None:
        raise ValueError("give either hosts or hostfile, not both")
    payload = _cloudpickle().dumps((func, tuple(args), dict(kwargs or {})))
    exchange = _Exchange(payload)
    try:
        with tempfile.TemporaryDirectory(prefix="hvdlite-run-") as folder:
            argv = _launcher_argv(given, folder)
            env = dict(os.environ, **{FUNCTION_ADDRESS_VARIABLE: f"{socket.gethostname()}:{exchange.port}",
                                      FUNCTION_SECRET_VARIABLE: exchange.secret})
            code = _launch(argv, env)
    finally:
        exchange.close()
    return _results(exchange.results, code)


def _launch(argv, env, started=None, stdout=None, stderr=None, timestamps=False):
    """Runs hvdliterun; its exit code. Interrupted (Ctrl-C in a notebook), the caller tells the launcher to stop, as
    a terminal would, and waits for it: the launcher then ends the job its own way (an elastic run's commits
    removed, say) instead of being killed, as subprocess.run would kill it. ``started(process)`` is called once it
    runs; ``stdout``/``stderr``: objects with ``write(str)`` that take the job's output (else this process's);
    ``timestamps``: each line of that output starts with the local time it reached this process."""
    if timestamps:
        stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    launcher = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if stdout is not None else None,
                                stderr=subprocess.PIPE if stderr is not None else None)
    copiers = [threading.Thread(target=_copy_lines, args=(pipe, to, timestamps), daemon=True)
               for pipe, to in ((launcher.stdout, stdout), (launcher.stderr, stderr)) if to is not None]
    for copier in copiers:
        copier.start()
    if started is not None:
        started(launcher)
    try:
        code = launcher.wait()
        for copier in copiers:
            copier.join()
        return code
    except BaseException:
        launcher.send_signal(signal.SIGINT)
        try:
            launcher.wait(timeout=KILL_GRACE_SECONDS + 20)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
        raise


def _copy_lines(pipe, to, timestamps):
    for line in iter(pipe.readline, b""):
        text = line.decode(errors="replace")
        to.write(f"{_timestamp()} {text}" if timestamps else text)
    pipe.close()


def _timestamp():
    """The local time to the millisecond, ISO 8601 (2026-12-03T17:47:08.123)."""
    return datetime.datetime.now().isoformat(timespec="milliseconds")


def _renamed(num_proc, np, min_num_proc, min_np, max_num_proc, max_np):
    """horovod.run's old names (np, min_np, max_np), taken with its warning."""
    for old, new in (("np", "num_proc"), ("min_np", "min_num_proc"), ("max_np", "max_num_proc")):
        if locals()[old] is not None:
            warnings.warn(f"{old} is deprecated, use {new} instead", DeprecationWarning, stacklevel=3)
    if np is not None and num_proc == 1:
        num_proc = np
    return num_proc, min_num_proc if min_num_proc is not None else min_np, \
        max_num_proc if max_num_proc is not None else max_np


def _launcher_argv(given, folder, launcher_exec=None):
    """hvdliterun's command line for run()'s arguments (given: run's locals). ``launcher_exec``: the program that
    reaches the hosts in ssh's place, which then answers for them (no ssh check of the hosts)."""
    argv = [sys.executable, "-m", "hvdlite.runner", "-np", str(given["num_proc"])]
    elastic = given["min_num_proc"] is not None or given["max_num_proc"] is not None
    if elastic:
        # Elastic on fixed hosts, as horovod.run is: a discovery script that always lists them.
        listing = os.path.join(folder, "hosts")
        with open(listing, "w") as stream:
            stream.write(_host_lines(given))
        argv += ["--host-discovery-script", f"cat {listing}"]
        for flag, name in (("--min-np", "min_num_proc"), ("--max-np", "max_num_proc"),
                           ("--slots-per-host", "slots"), ("--reset-limit", "reset_limit")):
            if given[name] is not None:
                argv += [flag, str(given[name])]
        if given["cooldown_range"] is not None:
            argv += ["--blacklist-cooldown-range", *map(str, given["cooldown_range"])]
    elif given["hosts"] is not None:
        argv += ["-H", given["hosts"]]
    elif given["hostfile"] is not None:
        argv += ["--hostfile", given["hostfile"]]
    for flag, name in (("--start-timeout", "start_timeout"), ("-p", "ssh_port"), ("-i", "ssh_identity_file"),
                       ("--output-filename", "output_filename"), ("--mpi-args", "mpi_args"),
                       ("--network-interface", "network_interface")):
        if given[name] is not None:
            argv += [flag, str(given[name])]
    if given["verbose"]:
        argv.append("--verbose")
    if launcher_exec:
        argv += ["--launcher-exec", launcher_exec, "--no-host-check"]
    return argv + [given["executable"] or sys.executable, "-m", "hvdlite.runner.function_worker"]


def _host_lines(given):
    if given["hosts"]:
        return "".join(f"{entry.strip()}\n" for entry in given["hosts"].split(",") if entry.strip())
    if given["hostfile"]:
        return "".join(f"{host.name}:{host.slots}\n" for host in read_hostfile(given["hostfile"]).hosts)
    return f"localhost:{max(given['num_proc'], given['max_num_proc'] or 0)}\n"


def _results(results, code):
    """The list of return values, or the error that the run's end calls for (the last start's: an elastic run's
    earlier starts may have failed)."""
    last_start = max((start for start, _, _ in results.values()), default=0)
    last = {rank: (kind, value) for rank, (start, kind, value) in sorted(results.items()) if start == last_start}
    failures = [(rank, value) for rank, (kind, value) in last.items() if kind == "error"]
    if failures:  # each failed rank's own words: the first to fail may not be the lowest rank
        which = ", ".join(str(rank) for rank, _ in failures)
        raise RankFailed(f"the function raised on rank{'s' if len(failures) > 1 else ''} {which} (the job's exit "
                         f"code: {code}):\n" + "".join(f"--- rank {rank} ---\n{text}" for rank, text in failures))
    if code != 0:
        raise RuntimeError(f"the job failed with exit code {code} (its output above says why)")
    if not last or list(last) != list(range(len(last))):
        raise RuntimeError(f"the job ended without every rank's result (got ranks {list(last)})")
    return [value for _, value in last.values()]
