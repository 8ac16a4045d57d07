"""How hvdliterun runs a Python program on each rank: `python -m hvdlite.runner.python_rank PROGRAM ...` runs it as
`python -m mpi4py PROGRAM ...` does, so that an uncaught exception or a non-zero sys.exit calls MPI_Abort and ends the
whole job (without it the failing rank hangs in MPI_Finalize and hydra never ends the job). Under --output-filename
the rank's output goes through a copier (rank_output.py), and the abort would end the job before the copier had passed
on the rank's traceback: so the rank first waits for its copier to have passed on everything. This is the program's
side of that wait; it imports no more than it needs, since every Python rank starts through it.

An unbuffered Python (PYTHONUNBUFFERED, which Spark sets for its workers and so for the ranks of its slots; python
-u) writes a print's text and its newline in two writes; MPI's launcher forwards the ranks' output as it reads it, so
another rank's line could land between them. The rank's stdout and stderr are made line-buffered instead: each line
still leaves as soon as it ends, in one write.
"""
import atexit
import os
import socket
import sys

FLUSH_VARIABLE = "HVDLITE_OUTPUT_COPIER_FD"  # the program's end of its channel to its copier (set by rank_output.py)
_FLUSH_WAIT = 10.0  # seconds the program waits for the copier's answer


def copier_channel():
    """The program's channel to its copier, or None when its output goes through none. Taken out of the environment,
    so that the program's own children do not see it."""
    fd = os.environ.pop(FLUSH_VARIABLE, None)
    if fd is None:
        return None
    try:
        channel = socket.socket(fileno=int(fd))
    except (OSError, ValueError):  # not a socket (a variable left from elsewhere)
        return None
    channel.set_inheritable(False)
    return channel


def flush_through_copier(channel, timeout=_FLUSH_WAIT):
    """Returns once the copier has passed on all that the program wrote so far, to the files and to MPI's launcher,
    or after timeout seconds."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced by the program
            pass
    try:
        channel.settimeout(timeout)
        channel.sendall(b"?")
        channel.recv(1)
    except OSError:  # the copier has gone or does not answer: nothing more to wait for
        pass


def whole_lines():
    """Unbuffered (write-through) standard streams become line-buffered: a line is written at once and whole."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "write_through", False):
            stream.reconfigure(write_through=False, line_buffering=True)


def main():
    whole_lines()
    channel = copier_channel()
    if channel is not None:
        # mpi4py calls MPI_Abort (or MPI_Finalize) from a C exit hook (Py_AtExit), after every atexit function.
        atexit.register(flush_through_copier, channel)
    from mpi4py.run import main as run_like_mpi4py
    run_like_mpi4py()


if __name__ == "__main__":
    main()
