"""Elastic training by restart: Horovod's ``hvd.elastic`` API over MPI.

MPI cannot re-form a communicator in the processes that survive a lost peer, so a failure ends the job and the
launcher (``hvdliterun --max-restarts`` or its elastic flags) starts it again, larger, smaller or the same. What
carries training across is the committed state: ``state.commit()`` keeps a copy in every host's memory, outside
the processes, and on its disk (commits.py), and ``run`` restores the newest commit any host holds when the job
starts again. See docs/elastic.md.
"""
from hvdlite.errors import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401

from .resume import run  # noqa: F401
from .state import ObjectState, State  # noqa: F401
