"""Reports to hvdliterun's port (hvdlite/runner/protocol.py) from something that is not one of the job's ranks, and
a job that waits while they are sent: what the launcher must neither act on nor be stopped by."""
import socket

# Each on a connection of its own: every report the port knows, without the secret, with a wrong one of the right
# length, and a line that never ends.
FORGED = [b"peer unreachable\n", b"0123456789abcdef0123456789abcdef peer unreachable\n", b"end\n", b"committed\n",
          b"starting 0\n", b"x" * 100000]

# argv: GO_FILE [then-report]. Rank 0 names the launcher's port; every rank waits for GO_FILE (the test forges its
# reports meanwhile), then all-reduce; with then-report, rank 0 then reports a peer unreachable as the core does,
# with the secret, and the launcher must end the job.
WAITING_JOB = """
import os, sys, time
from mpi4py import MPI
from hvdlite.runner.protocol import PEER_UNREACHABLE, tell_launcher
comm = MPI.COMM_WORLD
if comm.rank == 0:
    print("LAUNCHER " + os.environ["HVDLITE_LAUNCHER"], flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print(f"SUM {comm.rank} {comm.allreduce(comm.rank + 1)}", flush=True)
if sys.argv[2:] == ["then-report"] and comm.rank == 0:
    assert tell_launcher(PEER_UNREACHABLE)
    time.sleep(60)
comm.Barrier()
"""


def launcher_port(output_line):
    """The port from a job's 'LAUNCHER host:pid:start time:port' line."""
    return int(output_line.split()[-1].rsplit(":", 1)[1])


def forge(address, port):
    """Sends every FORGED report to the launcher's port at address, each on a connection of its own."""
    for line in FORGED:
        with socket.create_connection((address, port), timeout=5) as connection:
            try:
                connection.sendall(line)
            except OSError:  # the launcher may close a connection before taking all of a line that never ends
                pass
