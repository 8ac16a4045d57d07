"""Whether the launcher's hosts changed, agreed on by every rank.

hvdliterun (in elastic mode) answers on a TCP port named by HVDLITE_ELASTIC_NOTIFY=host:port: one line, "1" once
its host discovery has found room for more ranks or stopped listing a host the job runs on, else "0". Rank 0
asks, and an allreduce carries its answer to every rank, so that all of them stop at the same commit.

That allreduce is a collective of its own: made at every commit, it would cost a loop that commits every step a
negotiation round per step. So it is made at every check (commit or check_host_updates) only while checks come
at least CHECK_INTERVAL seconds apart; when they come faster, rank 0 sends along with its answer how many checks
to skip before the next one, counted from how fast they came (at most MAX_SKIPPED), so that every rank makes the
next allreduce at the same check, about CHECK_INTERVAL seconds later.
"""
import os
import socket
import time

import numpy as np

from hvdlite import basics, ops
from hvdlite.runner.protocol import NOTIFY_VARIABLE
CHECK_INTERVAL = 1.0
MAX_SKIPPED = 100  # bounds the delay when checks slow down after a fast stretch: at most this many checks

_checks = {"count": 0, "next": 0, "count_at_last": 0, "time_at_last": None}


def ask_launcher(address, timeout=5.0):
    """The launcher's answer at host:port (False when it cannot be reached: no news)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            return connection.makefile("rb").readline().strip() == b"1"
    except (OSError, ValueError):
        return False


def _to_skip(now):
    """Rank 0: how many checks to skip so that the next allreduce comes about CHECK_INTERVAL seconds from now."""
    last, checks = _checks["time_at_last"], _checks["count"] - _checks["count_at_last"]
    _checks["time_at_last"], _checks["count_at_last"] = now, _checks["count"]
    if last is None or checks <= 0:
        return 0
    per_check = (now - last) / checks
    return max(0, int(min(MAX_SKIPPED, CHECK_INTERVAL / per_check - 1))) if per_check > 0 else MAX_SKIPPED


def agreed(environ=os.environ):
    """True on every rank when rank 0 learnt that the hosts changed; no communication where no launcher listens,
    nor at the checks rank 0 said to skip."""
    address = environ.get(NOTIFY_VARIABLE)
    if not address:
        return False
    _checks["count"] += 1
    if _checks["count"] < _checks["next"]:
        return False
    news = skip = 0
    if basics.rank() == 0:
        news = int(ask_launcher(address))
        skip = _to_skip(time.monotonic())
    news, skip = (int(v) for v in ops.allreduce(np.array([news, skip], np.int64), op=ops.Max,
                                                 name="elastic.hosts_updated"))
    _checks["next"] = _checks["count"] + 1 + skip
    return bool(news)
