"""What hvdliterun and the ranks it starts both speak: the variables the launcher sets on every rank, the reports a
rank sends to the launcher's port, and the exit codes by which ranks ask the launcher for something. Both sides
import this module and nothing else of each other: ranks before MPI starts, the launcher without the native core.

The report port: hvdliterun listens on a TCP port of its host (job.listen_for_ranks) and names it to every rank in
HVDLITE_LAUNCHER (host:pid:start time:port), with a secret of that start in HVDLITE_LAUNCHER_SECRET. A rank sends
one line per report, the secret first: that a peer is unreachable (the native core's progress watchdog, which also
signals the launcher's pid on its own host: native/src/base/progress_watchdog.cc), that its host holds the job's first
elastic commit, that it is starting MPI and has started it (start_watch.py). The launcher acts on no line without
the secret: nothing but the job's own ranks can end it or change what it does.
"""
import os
import socket
import sys

from ..logging import launcher_rank

# Set by the launcher on every rank.
JOB_MARKER = "HVDLITE_JOB_ID"                 # one start of a job: the launcher finds its processes by it
LAUNCHER_VARIABLE = "HVDLITE_LAUNCHER"        # host:pid:start time:port of the launcher and its report port
SECRET_VARIABLE = "HVDLITE_LAUNCHER_SECRET"   # what leads every report to that port
JOB_VARIABLE = "HVDLITE_ELASTIC_JOB"          # the same on every start of one job: where the ranks find commits
RESTART_VARIABLE = "HVDLITE_ELASTIC_RESTART"  # which start of the job this is (0 for the first)
NOTIFY_VARIABLE = "HVDLITE_ELASTIC_NOTIFY"    # host:port answering "have the hosts changed?" (elastic.HostNews)
# Set by a program that starts hvdliterun again itself (an engine's elastic run, slot_elastic.py) on hvdliterun:
# the job's id on every start, whose commits that program keeps or removes (hvdliterun leaves them).
OUTER_JOB_VARIABLE = "HVDLITE_ELASTIC_OUTER_JOB"
FUNCTION_ADDRESS_VARIABLE = "HVDLITE_RUN_FUNCTION"  # hvdlite.run(func): host:port of the caller (function_runner)
FUNCTION_SECRET_VARIABLE = "HVDLITE_RUN_FUNCTION_SECRET"  # what leads every request to the caller's port

# Reports to the launcher's port.
PEER_UNREACHABLE = "peer unreachable"
COMMITTED = "committed"  # a rank wrote its host's first elastic commit: the job leaves commits if it fails
STARTING = "starting"    # "starting RANK": the rank is about to start MPI
STARTED = "started"      # "started RANK": it has

# Exit codes of ranks.
EXIT_HOSTS_UPDATED = 75  # EX_TEMPFAIL, "try again": the ranks stopped at a commit because the hosts changed


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


def report_mpi_start(word, environ=os.environ):
    """Tells the launcher this rank is STARTING or has STARTED MPI, where a launcher started it and MPI is not
    running in this process already (started by the program itself, the start watch does not apply)."""
    rank = launcher_rank(environ)
    if rank is not None and (word == STARTED or "mpi4py.MPI" not in sys.modules):
        tell_launcher(f"{word} {rank}", environ)
