"""Whether the launcher's hosts changed, agreed on by every rank.

hvdliterun (in elastic mode) answers on a TCP port named by HVDLITE_ELASTIC_NOTIFY=host:port: one line, "1" once
its host discovery has found room for more ranks or stopped listing a host the job runs on, else "0". Rank 0
asks (at most every CHECK_INTERVAL seconds) and an allreduce carries its answer to every rank, so that all of them
stop at the same commit.
"""
import os
import socket
import time

import numpy as np

from hvdlite import basics, ops
from hvdlite.run.elastic import NOTIFY_VARIABLE
CHECK_INTERVAL = 1.0

_last_check = [0.0]


def ask_launcher(address, timeout=5.0):
    """The launcher's answer at host:port (False when it cannot be reached: no news)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as connection:
            return connection.makefile("rb").readline().strip() == b"1"
    except (OSError, ValueError):
        return False


def agreed(environ=os.environ):
    """True on every rank when rank 0 learnt that the hosts changed; no communication where no launcher listens."""
    address = environ.get(NOTIFY_VARIABLE)
    if not address:
        return False
    news = 0
    if basics.rank() == 0 and time.monotonic() - _last_check[0] >= CHECK_INTERVAL:
        _last_check[0] = time.monotonic()
        news = int(ask_launcher(address))
    return bool(ops.allreduce(np.array([news], np.int32), op=ops.Max, name="elastic.hosts_updated")[0])
