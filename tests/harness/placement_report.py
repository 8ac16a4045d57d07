"""A program that says where each rank of a job landed, for tests of launches (Slurm, an MPIJob's pods): run with a
folder, each rank writes there its rank, size, host name, local and cross rank and size, whether two all-reduces
(one message, and one that the core splits between hosts and within them) came out right, and when its first
all-reduce finished. PLACED: what 2 hosts (h1, h2) x 2 ranks report when each host's ranks are numbered together."""

REPORT = """
import os, socket, sys, time
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
first_step_done = None
correct = True
for count in (1000, 1 << 20):
    out = hvd.allreduce(np.arange(count, dtype=np.float64) * (rank + 1), name=f"x{count}", op=hvd.Sum)
    correct &= bool(np.array_equal(out, np.arange(count, dtype=np.float64) * sum(range(1, size + 1))))
    first_step_done = first_step_done or time.time()
with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as report:
    print(rank, size, socket.gethostname(), f"{hvd.local_rank()}/{hvd.local_size()}",
          f"{hvd.cross_rank()}/{hvd.cross_size()}", correct, repr(first_step_done), file=report)
"""
# Ranks 0-1 on h1 and 2-3 on h2: Slurm's block distribution (srun's default), and hydra's filling of each host's
# slots in turn.
PLACED = [["0", "4", "h1", "0/2", "0/2", "True"], ["1", "4", "h1", "1/2", "0/2", "True"],
          ["2", "4", "h2", "0/2", "1/2", "True"], ["3", "4", "h2", "1/2", "1/2", "True"]]
