"""Every rank hvdliterun starts also gets torchrun's variables, so that a script written for torchrun
(init_process_group with any backend, LOCAL_RANK to pick a device) runs under hvdliterun unchanged: RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE from the MPI launcher's own variables, and MASTER_ADDR / MASTER_PORT, the same on
every rank, which hvdliterun chooses (the host of rank 0, a port free there when it is this host).

The ranks' numbers are only known once MPI's launcher has started each process, so the launcher runs each rank's
command as `python -m hvdlite.runner.torch_variables COMMAND...`, which sets them and becomes the command (exec): the
process stays the one MPI started.
"""
import os
import socket
import sys

from ..logging import launcher_local_rank, launcher_local_size, launcher_rank, launcher_size

MASTER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")


def wrap(command):
    return [sys.executable, "-m", "hvdlite.runner.torch_variables", *command]


def master(first_host, is_local):
    """MASTER_ADDR and MASTER_PORT for a job whose rank 0 runs on first_host (None: this host)."""
    with socket.socket() as probe:  # a port free here; on another host, most likely free too
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    address = "127.0.0.1" if first_host is None or is_local else first_host
    return {"MASTER_ADDR": address, "MASTER_PORT": str(port)}


def rank_variables(environ):
    """torchrun's per-rank variables from the MPI launcher's (those it does not give are left out)."""
    found = {"RANK": launcher_rank(environ), "WORLD_SIZE": launcher_size(environ),
             "LOCAL_RANK": launcher_local_rank(environ), "LOCAL_WORLD_SIZE": launcher_local_size(environ)}
    return {name: value for name, value in found.items() if value is not None}


def main(argv):
    if not argv:
        print("usage: python -m hvdlite.runner.torch_variables COMMAND...", file=sys.stderr)
        return 2
    env = dict(os.environ, **rank_variables(os.environ))
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as error:  # as rank_output.py reports it
        print(f"hvdliterun: cannot run {argv[0]}: {error.strerror}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
