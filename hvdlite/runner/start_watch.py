"""A job whose ranks never get through MPI's start-up ends with a message instead of waiting forever.

MPI_Init waits for every rank to reach the others; where they cannot (a host's interface that reaches none of
the others, such as docker0, taken for the way to them; a firewall), MPICH's ranks wait in it for good. Each rank
started by hvdliterun reports to the launcher, over its TCP port (job.py), just before MPI starts ("starting
RANK") and just after ("started RANK"). Once every rank of the job has reported starting, the launcher gives them
--start-timeout seconds to have all started; then it ends the job, saying what to check. A rank slow to reach
MPI_Init (loading data, importing a framework) holds nobody up: the time runs from the last rank's arrival.
Programs that do not start MPI through hvdlite report nothing and are not watched. (The ranks' side:
protocol.report_mpi_start.)
"""
import threading

from .protocol import STARTED, STARTING

DEFAULT_SECONDS = 120.0


class StartWatch:
    """The launcher's side: counts the ranks that reported starting and started, and calls on_stuck(ranks left)
    when every rank started MPI but some have not got through it ``seconds`` later."""

    def __init__(self, ranks, seconds, on_stuck):
        self.ranks, self.seconds, self.on_stuck = ranks, seconds, on_stuck
        self._starting, self._started = set(), set()
        self._lock = threading.Lock()
        self._timer = None

    def heard(self, word, rank):
        with self._lock:
            (self._starting if word == STARTING else self._started).add(rank)
            if self._timer is None and len(self._starting) >= self.ranks and len(self._started) < self.ranks:
                self._timer = threading.Timer(self.seconds, self._check)
                self._timer.daemon = True
                self._timer.start()

    def _check(self):
        with self._lock:
            left = self.ranks - len(self._started)
        if left > 0:
            self.on_stuck(left)

    def cancel(self):
        if self._timer is not None:
            self._timer.cancel()


def parse(report):
    """(STARTING or STARTED, rank) from a report line, or None when it is not one of these."""
    word, _, rank = report.partition(" ")
    return (word, int(rank)) if word in (STARTING, STARTED) and rank.isdigit() else None
