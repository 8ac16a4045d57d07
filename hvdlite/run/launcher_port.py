"""The ranks' side of the line to hvdliterun: what a rank tells the launcher that started it, over TCP.

hvdliterun listens on a port of its host (job.listen_for_ranks) and names it to every rank in HVDLITE_LAUNCHER
(host:pid:start time:port), with a secret of that start in HVDLITE_LAUNCHER_SECRET. A rank sends one line per
report, the secret first: that a peer is unreachable (the native core's progress watchdog, which also signals the
launcher's pid on its own host), that its host holds the job's first elastic commit, that it is starting MPI and
has started it (start_watch.py). The launcher acts on no line without the secret: nothing but the job's own ranks
can end it or change what it does. Only the standard library: ranks import it before MPI starts.
"""
import os
import socket

LAUNCHER_VARIABLE = "HVDLITE_LAUNCHER"
SECRET_VARIABLE = "HVDLITE_LAUNCHER_SECRET"
PEER_UNREACHABLE = "peer unreachable"
COMMITTED = "committed"  # a rank wrote its host's first elastic commit: the job leaves commits if it fails


def report_line(secret, report):
    return f"{secret} {report}\n".encode()


def tell_launcher(report, environ=os.environ, timeout=2.0):
    """Sends one report line to the launcher that started this rank, if one did; False when it could not be told."""
    host, _, port = environ.get(LAUNCHER_VARIABLE, "").rpartition(":")
    host = host.split(":")[0]
    secret = environ.get(SECRET_VARIABLE, "")
    if not host or not port.isdigit() or not secret:
        return False
    # From the launcher's own host, the loopback address (the launcher always listens there; its name may not
    # resolve on that host).
    address = "127.0.0.1" if host == socket.gethostname() else host
    try:
        with socket.create_connection((address, int(port)), timeout=timeout) as connection:
            connection.sendall(report_line(secret, report))
        return True
    except OSError:
        return False
