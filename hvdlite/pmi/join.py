"""Starts MPI in a process that is rank ``rank`` of ``size`` processes some other launcher started, meeting the
others through a key-value store they all reach (torch's store): rank 0 starts the PMI server (server.py) as its
child and puts where it listens in the store; every rank takes that from the store and starts MPI with it as its
process manager (MPICH's PMI_PORT and PMI_ID)."""
import json
import os
import socket
import subprocess
import sys

from ..runner.reachability import first_answering
from ..runner.report_port import ipv4_addresses

_SERVER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
_server = None  # rank 0's PMI server, held so that its standard input stays open while this process runs


def join(store, rank, size, timeout_seconds, init_mpi):
    """``store``: set(key, value) and a get(key) that waits for the key (torch's Store). ``init_mpi``: starts MPI
    (mpi4py's Init_thread), called with the server named in this process's environment."""
    # torchrun's agent keeps its store across restarts of the workers: each restart's server under its own key.
    key = f"hvdlite/pmi_server/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if rank == 0:
        store.set(key, json.dumps(_start_server(size, timeout_seconds)))
    where = json.loads(store.get(key))
    address = _reachable_address(where)
    os.environ["PMI_PORT"] = f"{address}:{where['port']}"
    os.environ["PMI_ID"] = str(rank)
    try:
        init_mpi()
    finally:
        # MPI has read them; processes this one starts later (data loader workers) are not ranks.
        del os.environ["PMI_PORT"], os.environ["PMI_ID"]


def _start_server(size, timeout_seconds):
    global _server
    _server = subprocess.Popen([sys.executable, "-I", _SERVER_PATH, "--size", str(size), "--timeout",
                                str(timeout_seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=_without_pmi_variables(os.environ))
    port = _server.stdout.readline().strip()
    if not port.isdigit():
        raise RuntimeError(f"hvdlite: the PMI server did not start (exit code {_server.poll()})")
    return {"host": socket.gethostname(), "addresses": ipv4_addresses(), "port": int(port)}


def _without_pmi_variables(environ):
    return {name: value for name, value in environ.items() if not name.startswith("PMI_")}


def _reachable_address(where):
    """Loopback on rank 0's host; elsewhere its host name, then each of its addresses: the first that answers."""
    if where["host"] == socket.gethostname():
        return "127.0.0.1"
    names = [where["host"], *where["addresses"]]
    found = first_answering([(name, where["port"]) for name in names])
    if found is None:
        raise RuntimeError(f"hvdlite: rank 0's PMI server (port {where['port']}) answers on none of its host's names "
                           f"and addresses from here: {names}")
    return found[0]
