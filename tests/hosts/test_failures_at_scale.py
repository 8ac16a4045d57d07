"""A lost rank or host at many hosts ends the job as fast as at two (tests/hosts/test_multihost.py): 16 simulated hosts
with one rank each (32 in make check-long), every rank all-reducing step after step, through the rounds across hosts
and the ring across hosts: a rank killed on a middle host, and a host cut off from the network (its processes alive,
its connections silent: the progress timeout), end the job on every host within the same bound, leaving nothing
behind. The 32-host ones are marked check_long."""
import os
import sys
import textwrap
import time

import pytest

from harness.job_ends import start_until_every_rank_says, wait_for_the_end
from harness.processes import QUIET_THREADS, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, hosts_for_tests

pytestmark = [pytest.mark.simulated_hosts, pytest.mark.many_ranks]
ENDS_WITHIN_S = 30  # as at 2 hosts
COUNTS = [16, pytest.param(32, marks=pytest.mark.check_long)]
JOB = """
import os, signal, sys
import numpy as np
import hvdlite as hvd
hvd.init()
rank, size = hvd.rank(), hvd.size()
victim = int(sys.argv[1])
print(f"LOOPING {rank}", flush=True)
step = 0
while True:  # until the victim dies (after 20 steps) or the test cuts a host off
    small = hvd.allreduce(np.full(1024, 1.0, dtype=np.float32), name="small", op=hvd.Sum)
    large = hvd.allreduce(np.full(1 << 18, 1.0, dtype=np.float32), name="large", op=hvd.Sum)  # the ring's size
    assert small[0] == size and large[-1] == size, (small[0], large[-1])
    step += 1
    if rank == victim and step == 20:
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module", params=COUNTS, ids=lambda count: f"{count} hosts")
def hosts(request):
    with hosts_for_tests(request.param, "the failures at scale") as made:
        yield made


def start_looping_job(hosts, tmp_path, victim):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    count = len(hosts.names)
    command = [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "-np", str(count),
               "-H", ",".join(f"{name}:1" for name in hosts.names), sys.executable, str(script), str(victim)]
    return start_until_every_rank_says(hosts, command, count, "LOOPING",
                                       dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS["ofi"]), str(tmp_path), 120)


def test_a_killed_rank_ends_the_job_on_every_host(hosts, tmp_path):
    process, lines = start_looping_job(hosts, tmp_path, victim=len(hosts.names) // 2)
    took, output = wait_for_the_end(hosts, process, lines, time.monotonic(), ENDS_WITHIN_S)
    assert took < ENDS_WITHIN_S, output[-3000:]


def test_a_host_cut_off_from_the_network_ends_the_job_on_every_host(hosts, tmp_path, monkeypatch):
    # Nothing closes the connections: without the progress timeout every rank would wait for TCP to give up.
    monkeypatch.setenv("HVDLITE_PROGRESS_TIMEOUT_SECONDS", "5")
    process, lines = start_looping_job(hosts, tmp_path, victim=-1)
    cut = hosts.names[len(hosts.names) // 2 + 1]
    started = time.monotonic()
    hosts.set_link(cut, up=False)
    try:
        took, output = wait_for_the_end(hosts, process, lines, started, ENDS_WITHIN_S)
    finally:
        hosts.set_link(cut, up=True)
    assert took < ENDS_WITHIN_S, output[-3000:]
    assert "no progress for" in output and "a peer is unreachable" in output, output[-3000:]
    assert output.count("hvdliterun: a rank found a peer unreachable") == 1, output[-3000:]
