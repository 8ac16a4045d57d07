"""Memory is bounded: handles are freed and buffers reused, so nothing grows with the number of steps."""
from conftest import assert_ran_ok, run_mpi

STEPS = """
import numpy as np
import hvdlite as hvd
from hvdlite import ops

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4

def step(i):
    handles = [hvd.allreduce_async(np.full(5000, float(j)), name=f"grad.{j}") for j in range(20)]
    for j, h in enumerate(handles):
        assert hvd.synchronize(h)[0] == j
    hvd.allgather(np.ones((hvd.rank() + 1, 3)), name="gather")
    hvd.broadcast(np.ones(100), root_rank=0, name="bcast")
    hvd.allreduce(np.ones(7), name=f"unique.{i}")  # a new name every step: the cache must evict
    # A named group reuses its prepared requests; at 1.25 MB it takes the large-message path (direct on
    # one host: a staging buffer reused step after step).
    outs = hvd.grouped_allreduce([np.full(40000, float(j)) for j in range(4)], name="group")
    assert outs[3][0] == 3 and len(ops._PREPARED_GROUPS) == 1

hvd.init()
for i in range(300):
    step(i)
before = rss_kib()
for i in range(300, 2300):
    step(i)
after = rss_kib()
assert not ops._pending, len(ops._pending)
assert after - before < 3 * 1024, f"RSS grew by {after - before} KiB over 2000 steps"
print("WORKER OK", before, after)
"""


def test_memory_does_not_grow_with_steps(tmp_path):
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    # A small cache makes eviction part of every step.
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_CACHE_CAPACITY": "64"}, timeout=400), 2)
