"""hvdliterun --output-filename DIR: each rank's stdout and stderr also go to DIR/rank.N/stdout and DIR/rank.N/stderr
(horovodrun's layout: N zero-padded to the width of the largest rank), on the host the rank runs on, as MPI's own
output files are; the console shows the same output as without the flag.

The launcher runs each rank's command as `python -m hvdlite.runner.rank_output DIR COMMAND...`. That process makes
two pipes, leaves a copier process behind that writes what comes through them to the files and to where the
output went before, and then becomes the rank's program (exec): the program keeps the process MPI started, so
signals, the exit code and MPI's view of the rank are unchanged. The copier ends when the pipes close, that is when
the program and whatever it started have ended. A rank's last words (a traceback) must still reach the files when
the job is being stopped: the copier ignores the signals that stop a job, and lives in a session of its own, out of
reach of MPI's kill of the rank's process group (SIGKILL, once another rank has failed). While it runs it holds a
shared lock on DIR, so that hvdliterun returns only once the copiers on its host have written everything
(wait_for_copiers).

A rank that aborts the job (python_rank.py: an uncaught exception) would lose its last words on the console all the
same: MPI's launcher ends the job as the abort reaches it, without reading what is still on its way through the
copier. So the program also gets a channel to its copier (FLUSH_VARIABLE names its descriptor): as a Python rank ends,
before it can abort, it asks the copier to pass on everything written so far and waits for the answer
(python_rank.flush_through_copier), which comes once MPI's launcher has read it.
"""
import fcntl
import os
import selectors
import signal
import socket
import stat
import sys
import termios
import threading
import time

from ..logging import launcher_rank, launcher_size
from .protocol import RESTART_VARIABLE  # a restarted job adds to the files of its earlier starts
from .python_rank import FLUSH_VARIABLE  # the program's end of its channel to its copier

_CONSOLE_READ_WAIT = 5.0  # seconds a flush waits for MPI's launcher to read the console (a stalled one: give up)


def wrap(directory, command):
    """The command a rank runs so that its output also goes to directory (made absolute here: ranks may start
    elsewhere)."""
    return [sys.executable, "-m", "hvdlite.runner.rank_output", os.path.abspath(directory), *command]


def padded_rank(rank, size):
    """horovodrun's spelling: rank 3 of 12 is '03'."""
    return str(rank).zfill(len(str(max(size - 1, 0))))


def rank_folder(directory, environ):
    rank = launcher_rank(environ)
    if rank is None:
        raise RuntimeError("--output-filename: no rank in the environment (PMI_RANK or OMPI_COMM_WORLD_RANK): "
                           "this command is meant to be started by hvdliterun's mpiexec")
    size = int(launcher_size(environ) or int(rank) + 1)
    return os.path.join(directory, f"rank.{padded_rank(int(rank), size)}")


def _copy(sources, channel):
    """Copies each readable fd to its (file fd, console fd) pairs until every source is closed; answers the
    program's flush requests on channel."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    selector = selectors.DefaultSelector()
    for source in (*sources, channel):
        selector.register(source, selectors.EVENT_READ)
    console_open = {targets[1]: True for targets in sources.values()}

    def pass_on(source, chunk):
        file_fd, console_fd = sources[source]
        _write_all(file_fd, chunk)
        if console_open[console_fd]:
            try:
                _write_all(console_fd, chunk)
            except OSError:  # the console went away (mpiexec ended): the file still gets everything
                console_open[console_fd] = False

    open_sources = set(sources)
    while open_sources:
        for key, _ in selector.select():
            if key.fd == channel:
                consoles = [fd for fd, is_open in console_open.items() if is_open]
                if not _answer(channel, lambda: _flush(sources, pass_on, consoles)):
                    selector.unregister(channel)  # the program has ended (or closed it)
                continue
            chunk = os.read(key.fd, 65536)
            if chunk:
                pass_on(key.fd, chunk)
            else:
                selector.unregister(key.fd)
                os.close(key.fd)
                open_sources.discard(key.fd)


def _answer(channel, flush):
    """Serves the program's flush requests waiting on channel; False once its end is gone."""
    try:
        request = os.read(channel, 64)
        if request:
            flush()
            os.write(channel, b"!" * len(request))  # one answer to each asker
        return bool(request)
    except OSError:  # the program's end went away before its answer
        return False


def _flush(sources, pass_on, consoles):
    """Passes on all that the sources hold (the program, waiting for the answer, writes no more meanwhile), then waits
    until MPI's launcher has read the consoles that are pipes, or for _CONSOLE_READ_WAIT seconds."""
    for source in sources:
        try:
            waiting = _unread_bytes(source)
        except OSError:  # closed already: all of it was passed on
            continue
        while waiting > 0:
            chunk = os.read(source, waiting)
            if not chunk:
                break
            pass_on(source, chunk)
            waiting -= len(chunk)
    # Nothing wakes a writer when its pipe empties, so this polls, backing off (once, at a rank's end).
    pipes = [fd for fd in consoles if stat.S_ISFIFO(os.fstat(fd).st_mode)]
    deadline, pause = time.monotonic() + _CONSOLE_READ_WAIT, 0.001
    while any(_unread_bytes(fd) for fd in pipes) and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _unread_bytes(fd):
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder, signed=True)


def wait_for_copiers(directory, timeout=30.0):
    """Returns once no copier on this host holds its lock on directory (every rank's output is in its files), or
    after timeout seconds."""
    try:
        fd = os.open(os.path.abspath(directory), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # no rank made it (or another host's folder)
        return
    locked = threading.Thread(target=fcntl.flock, args=(fd, fcntl.LOCK_EX), daemon=True)
    locked.start()
    locked.join(timeout)
    if not locked.is_alive():
        os.close(fd)  # else it goes with the process: the blocked flock still uses it


def _close_all_but(keep):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed already
                pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m hvdlite.runner.rank_output DIR COMMAND...", file=sys.stderr)
        return 2
    directory, command = argv[0], argv[1:]
    try:
        folder = rank_folder(directory, os.environ)
        os.makedirs(folder, exist_ok=True)
        mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if os.environ.get(RESTART_VARIABLE, "0") != "0"
                                           else os.O_TRUNC)
        files = [os.open(os.path.join(folder, name), mode, 0o644) for name in ("stdout", "stderr")]
        # Shared by the copier (the fork keeps it); this process's descriptor goes at exec.
        lock = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(lock, fcntl.LOCK_SH)
    except (OSError, RuntimeError, ValueError) as error:
        print(f"hvdliterun --output-filename: {error}", file=sys.stderr, flush=True)
        return 1
    pipes = [os.pipe(), os.pipe()]
    program_end, copier_end = socket.socketpair()
    sys.stdout.flush()
    sys.stderr.flush()
    # Two forks, so that the copier is nobody's child once this process becomes the program (a program waiting
    # for "any child" never sees it).
    first = os.fork()
    if first == 0:
        if os.fork() == 0:
            try:
                os.setsid()
                # Only what it copies from and to, and its lock: a descriptor MPI handed the rank (hydra's PMI
                # socket) stays the program's alone.
                _close_all_but({1, 2, pipes[0][0], pipes[1][0], *files, lock, copier_end.fileno()})
                _copy({pipes[0][0]: (files[0], 1), pipes[1][0]: (files[1], 2)}, copier_end.fileno())
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(first, 0)
    for (read_end, write_end), target, file_fd in zip(pipes, (1, 2), files):
        os.dup2(write_end, target)
        os.close(write_end)
        os.close(read_end)
        os.close(file_fd)
    copier_end.close()
    program_end.set_inheritable(True)
    os.environ[FLUSH_VARIABLE] = str(program_end.fileno())
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"hvdliterun: cannot run {command[0]}: {error.strerror}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())
