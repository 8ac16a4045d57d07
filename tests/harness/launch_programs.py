"""Programs that tests of launches run as their jobs (over ssh, under Slurm, in an MPIJob's pods), each given a
folder to write to, and what they write:

- REPORT: each rank writes its rank, size, host name, local and cross rank and size, whether two all-reduces (one
  message, and one that the core splits between hosts and within them) came out right, and when its first
  all-reduce finished; PLACED: what 2 hosts (h1, h2) x 2 ranks report when each host's ranks are numbered together;
- ELASTIC: an hvd.elastic job of 30 steps whose last rank kills itself after the commit of step 10 on its first
  start (check_elastic_restart checks a run of it on 4 ranks restarted once);
- LOOP: all-reduces until the job is ended (argument "loop") or its last rank kills itself after 20 steps
  ("die"); each rank says it started with a file started<rank>.
"""

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


ELASTIC = """
import os, signal, sys
import numpy as np
import hvdlite as hvd
from hvdlite.elastic import ObjectState, run
from hvdlite.elastic.resume import restarts

hvd.init()
out, start = sys.argv[1], restarts()


@run
def train(state):
    with open(os.path.join(out, f"resumed-{start}-{hvd.rank()}"), "w") as report:
        report.write(str(state.step))
    while state.step < 30:
        gradient = np.full(8, float((hvd.rank() + 1) * (state.step + 1)))
        state.weights = state.weights + hvd.allreduce(gradient, name="gradient", op=hvd.Sum)
        state.step += 1
        state.commit()
        if start == 0 and hvd.rank() == hvd.size() - 1 and state.step == 10:
            os.kill(os.getpid(), signal.SIGKILL)
    return state.weights


weights = train(ObjectState(step=0, weights=np.zeros(8)))
with open(os.path.join(out, f"weights-{hvd.rank()}"), "w") as report:
    report.write(" ".join(map(repr, weights.tolist())))
"""


def check_elastic_restart(folder, ranks=4):
    """ELASTIC's run restarted once: every rank started at step 0, then resumed from the same newest commit (step 9
    or 10: the kill may come before the others' commit), and the result is exact (what 30 steps of sums of every
    rank's (rank + 1) x step make, computed here)."""
    resumed = {(start, rank): int((folder / f"resumed-{start}-{rank}").read_text())
               for start in (0, 1) for rank in range(ranks)}
    assert [resumed[0, rank] for rank in range(ranks)] == [0] * ranks
    again = {resumed[1, rank] for rank in range(ranks)}
    assert len(again) == 1 and 9 <= again.pop() <= 10, resumed
    expected = float(sum(rank + 1 for rank in range(ranks)) * sum(step + 1 for step in range(30)))
    for rank in range(ranks):
        weights = [float(w) for w in (folder / f"weights-{rank}").read_text().split()]
        assert weights == [expected] * 8, (rank, weights)


LOOP = """
import os, signal, sys
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
step = 0
while True:  # until a rank dies (mode "die": the last rank, after 20 steps) or the test cuts a host off
    hvd.allreduce(np.full(4096, 1.0, dtype=np.float32), name="step", op=hvd.Sum)
    step += 1
    if step == 1:
        open(os.path.join(sys.argv[1], f"started{rank}"), "w").close()
    if sys.argv[2] == "die" and rank == size - 1 and step == 20:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def command_line(pid):
    """A process's command line as one string ('' once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return stream.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""
