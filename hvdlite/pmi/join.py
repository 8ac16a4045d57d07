"""Starts MPI in a process that is rank ``rank`` of ``size`` processes some other launcher started, meeting the
others through a key-value store they all reach (torch's store): rank 0 starts the PMI server (server.py) as its
child and puts where it listens in the store; every rank takes that from the store and starts MPI with it as its
process manager (MPICH's PMI_PORT and PMI_ID)."""
import json
import os
import socket
import subprocess
import sys

from ..runner.report_port import interface_address

SERVER_KEY = "hvdlite/pmi_server"
_SERVER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
_server = None  # rank 0's PMI server: its standard input stays open as long as this process lives


def join(store, rank, size, timeout_seconds, init_mpi):
    """``store``: set(key, value) and a get(key) that waits for the key (torch's Store). ``init_mpi``: starts MPI
    (mpi4py's Init_thread), called with the server named in this process's environment."""
    if rank == 0:
        store.set(SERVER_KEY, json.dumps(_start_server(size, timeout_seconds)))
    where = json.loads(store.get(SERVER_KEY))
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
    return {"host": socket.gethostname(), "addresses": _ipv4_addresses(), "port": int(port)}


def _without_pmi_variables(environ):
    return {name: value for name, value in environ.items() if not name.startswith("PMI_")}


def _ipv4_addresses():
    """This host's IPv4 addresses other than loopback, in interface order."""
    found = (interface_address(name) for _, name in socket.if_nameindex() if name != "lo")
    return [address for address in dict.fromkeys(found) if address]


def _reachable_address(where, connect_seconds=3):
    """Loopback on rank 0's host; elsewhere its host name, then each of its addresses: the first that answers."""
    if where["host"] == socket.gethostname():
        return "127.0.0.1"
    for address in [where["host"], *where["addresses"]]:
        try:
            with socket.create_connection((address, where["port"]), timeout=connect_seconds):
                pass
        except OSError:
            continue
        return address
    raise RuntimeError(f"hvdlite: rank 0's PMI server (port {where['port']}) answers on none of its host's names and "
                       f"addresses from here: {[where['host'], *where['addresses']]}")
