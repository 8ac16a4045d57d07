"""The ranks' side of the line to hvdliterun: what a rank tells the launcher that started it, over TCP.

hvdliterun listens on a port of its host (job.listen_for_ranks) and names it to every rank in HVDLITE_LAUNCHER
(host:pid:start time:port). A rank sends one line per report: that a peer is unreachable (the native core's
progress watchdog, which also signals the launcher's pid on its own host), that its host holds the job's first
elastic commit, that it is starting MPI and has started it (start_watch.py). Only the standard library: ranks
import it before MPI starts.
"""
import os
import socket

LAUNCHER_VARIABLE = "HVDLITE_LAUNCHER"
PEER_UNREACHABLE = "peer unreachable"
COMMITTED = "committed"  # a rank wrote its host's first elastic commit: the job leaves commits if it fails


def tell_launcher(report, environ=os.environ, timeout=2.0):
    """Sends one report line to the launcher that started this rank, if one did; False when it could not be told."""
    host, _, port = environ.get(LAUNCHER_VARIABLE, "").rpartition(":")
    host = host.split(":")[0]
    if not host or not port.isdigit():
        return False
    # The launcher listens on every address of its host: from that host, on the loopback one (its name may not
    # resolve there).
    address = "127.0.0.1" if host == socket.gethostname() else host
    try:
        with socket.create_connection((address, int(port)), timeout=timeout) as connection:
            connection.sendall(f"{report}\n".encode())
        return True
    except OSError:
        return False
