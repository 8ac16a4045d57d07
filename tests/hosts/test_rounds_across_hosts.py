"""Negotiation rounds across hosts over the core's TCP connections (native/src/negotiation/round_across_hosts.h), on
simulated hosts (network namespaces, needs root): around the ring, and in log2(hosts) steps at doubling distances.

A rank that waits in a round for a peer that is not running (stopped with SIGSTOP for 3 s, as a rank descheduled on
a busy host or still computing) keeps no core busy on the other hosts: its process uses a small part of a core over
the wait, where MPI's all-reduce polled for the whole of it (the tensor is cached and too big to ride in the round:
the slow path, for names not yet agreed, and rounds that carry small all-reduces' values still go by MPI). Rounds of
bits over the connections and rounds that carry small all-reduces' values over MPI (eager, random float32 values,
many steps) interleave: those all-reduces equal the float64 reference on every rank and are bitwise equal across
ranks, on 3 hosts x 1 rank and 2 hosts x 2 ranks, either way across hosts.

On 8 hosts of one rank each, over both of MPICH's network layers, ranks that go quiet between calls and wake each
other (collectives of every kind, ranks arriving apart) finish every call with the reference results: a rank's wake
message once blocked in MPI_Isend for good there (MPI's connection to a peer not yet made needs that peer to drive
MPI's progress, and the peer was waiting for the rank in a round over the ring's TCP connections).
"""
import os
import re
import sys
import textwrap

import pytest

from harness.processes import QUIET_THREADS, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, hosts_for_tests

pytestmark = pytest.mark.simulated_hosts

PAUSE_S = 3.0

JOB = f"""
import hashlib, os, signal, socket, subprocess, sys, time
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
digest = hashlib.sha256()
for step in range(30):  # small tensors: after a few steps their values ride in the rounds
    for t in range(3):
        values = [np.random.default_rng(1000 * step + 10 * t + r).standard_normal(257).astype(np.float32)
                  for r in range(size)]
        out = hvd.allreduce(values[rank], name=f"small.{{t}}", op=hvd.Sum)
        reference = np.sum([v.astype(np.float64) for v in values], axis=0)
        assert np.allclose(out, reference, rtol=1e-5, atol=1e-5), (step, t, np.abs(out - reference).max())
        digest.update(out.tobytes())
print(f"DIGEST {{rank}} {{digest.hexdigest()}}", flush=True)
# Cached, so that the wait below is a round's (a new name would wait in MPI's slow path), and over 16 KiB, so that it
# does not ride in the round (rounds with values go by MPI).
for step in range(3):
    hvd.allreduce(np.ones(1 << 14, np.float32), name="after the pause", op=hvd.Sum)

if rank == 0:  # resumed by a helper PAUSE_S later; the others wait for it in a round
    subprocess.Popen(["sh", "-c", f"sleep {PAUSE_S}; kill -CONT {{os.getpid()}}"])
    os.kill(os.getpid(), signal.SIGSTOP)
cpu, wall = time.process_time(), time.monotonic()
out = hvd.allreduce(np.ones(1 << 14, np.float32), name="after the pause", op=hvd.Sum)
cpu, wall = time.process_time() - cpu, time.monotonic() - wall
assert np.all(out == size), out[:4]
print(f"WAITED {{rank}} {{socket.gethostname()}} {{wall:.3f}} {{cpu:.3f}}", flush=True)
hvd.shutdown()
"""


@pytest.fixture(scope="module")
def hosts():
    with hosts_for_tests(8, "the tests of rounds across hosts") as made:  # the first 3 or 2 of them, or all
        yield made


# The round's step across hosts: the ring's gather, or dissemination at doubling distances (forced from 2 hosts
# here; 3 hosts: not a power of two, so some blocks fold in twice).
WAYS = {"around the ring": "1000", "in log2(hosts) steps": "2"}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("host_list,np_", [("h1:1,h2:1,h3:1", 3), ("h1:2,h2:2", 4)], ids=["3x1", "2x2"])
def test_a_round_waiting_for_a_stopped_peer_keeps_no_core_busy_and_eager_values_agree(hosts, tmp_path, host_list,
                                                                                      np_, way):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS["ofi"], HVDLITE_LOG_LEVEL="debug",
               HVDLITE_ROUND_DOUBLING_MIN_HOSTS=WAYS[way])
    result = hosts.run("h1", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "-np", str(np_),
                              "-H", host_list, sys.executable, str(script)], timeout=180, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert f"negotiation rounds across hosts wait on the TCP connections, {way}" in result.stdout, \
        result.stdout[-6000:]
    digests = dict(re.findall(r"DIGEST (\d+) ([0-9a-f]{64})", result.stdout))  # ranks' lines may be spliced
    assert len(digests) == np_, result.stdout[-6000:]
    assert len(set(digests.values())) == 1, f"eager results differ between ranks: {digests}"
    waited = {int(rank): (host, float(wall), float(cpu))
              for rank, host, wall, cpu in re.findall(r"WAITED (\d+) (\w+) ([\d.]+) ([\d.]+)", result.stdout)}
    assert len(waited) == np_, result.stdout[-6000:]
    stopped_host = waited[0][0]
    # Ranks on rank 0's own host wait for it within the host, over MPI (shared memory): not what this checks.
    others = {rank: w for rank, w in waited.items() if w[0] != stopped_host}
    assert others, waited
    for rank, (host, wall, cpu) in others.items():
        assert wall > 0.8 * PAUSE_S, f"rank {rank} did not wait for the stopped rank: {waited}"
        assert cpu < 0.2 * wall, f"rank {rank} kept {cpu / wall:.2f} of a core busy while it waited: {waited}"


WAKES = """
import time
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
for step in range(40):
    out = hvd.allreduce(np.full(1 << 15, float(rank + step), np.float32), name=f"a{step % 4}", op=hvd.Sum)
    assert np.all(out == sum(r + step for r in range(size))), step
    rows = hvd.allgather(np.full((rank + 1, 3), rank, np.int64), name=f"g{step % 4}")
    assert np.array_equal(rows[:, 0], np.repeat(np.arange(size), np.arange(1, size + 1))), step
    b = hvd.broadcast(np.full(5, rank, np.float64), root_rank=step % size, name=f"b{step % 4}")
    assert np.all(b == step % size), step
    if step % 10 == 0:
        time.sleep(0.05 * (rank % 3))  # ranks arrive apart: the first ones go quiet and are woken
print(f"DONE {rank}", flush=True)
hvd.shutdown()
"""


@pytest.mark.parametrize("network", ["ofi", "ucx"])
def test_ranks_that_go_quiet_wake_each_other_on_8_hosts_of_one_rank(hosts, tmp_path, network):
    script = tmp_path / "wakes.py"
    script.write_text(WAKES)
    env = dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS[network], HVDLITE_PROGRESS_TIMEOUT_SECONDS="60")
    result = hosts.run("h1", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "-np", "8",
                              "-H", ",".join(f"{h}:1" for h in hosts.names), sys.executable, str(script)],
                       timeout=240, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    assert sorted(re.findall(r"DONE (\d+)", result.stdout)) == sorted(str(r) for r in range(8)), result.stdout[-6000:]
