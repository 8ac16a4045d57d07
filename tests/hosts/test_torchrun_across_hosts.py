"""torchrun across two simulated hosts (hvdlite/testing/simulated_hosts.py; needs root), started on each host as an operator
would (static rendezvous at the first host's address): the four ranks torchrun starts become one MPI job inside
init_process_group("hvdlite"), over each of MPICH's network layers, with two ranks on each host sharing its memory.
Every rank checks the job (tests/torch/programs/one_job.py: an all_reduce and DDP's parameters against float64
references) and says where it ran. A Horovod-API script (hvd.init()) does the same through the store of torchrun's
agent."""
import json
import os
import sys

import pytest

from harness.processes import QUIET_THREADS, TESTS_DIR, with_hvdlite_importable
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, SimulatedHosts

pytestmark = pytest.mark.simulated_hosts

ONE_JOB = os.path.join(TESTS_DIR, "torch", "programs", "one_job.py")
MASTER_PORT = 29517


# A Horovod-API job (hvd.init(), no process group): its ranks meet through the store of torchrun's agent.
HOROVOD_JOB = """
import json, os, socket, sys
import numpy as np
import hvdlite as hvd
hvd.init()
inputs = lambda r: np.arange(1000, dtype=np.float64) * (r + 1) + 0.5 * r
total = hvd.allreduce(inputs(hvd.rank()), op=hvd.Sum, name="total")
assert np.array_equal(total, sum(inputs(r) for r in range(hvd.size()))), total[:4]
with open(os.path.join(sys.argv[1], f"rank{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "host": socket.gethostname(), "local_rank": hvd.local_rank(),
               "local_size": hvd.local_size()}, f)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("network", sorted(NETWORK_LAYERS))
def test_ranks_torchrun_started_on_two_hosts_become_one_mpi_job(tmp_path, network):
    run_on_two_hosts(tmp_path, network, ONE_JOB)


@pytest.mark.timeout(300)
def test_a_horovod_script_under_torchrun_on_two_hosts(tmp_path):
    program = tmp_path / "horovod_job.py"
    program.write_text(HOROVOD_JOB)
    run_on_two_hosts(tmp_path, "ofi", str(program))


def run_on_two_hosts(tmp_path, network, program):
    """torchrun on each of two hosts, two ranks each, running ``program OUT``; checks where each rank ran."""
    env = with_hvdlite_importable(dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS[network]))
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    with SimulatedHosts(2) as hosts:
        master = hosts.address("h1")
        agents = {}
        for node_rank, host in enumerate(hosts.names):
            command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                       str(node_rank), "--nproc-per-node", "2", "--master-addr", master, "--master-port",
                       str(MASTER_PORT), program, str(tmp_path)]
            log = open(tmp_path / f"{host}.log", "w")
            agents[host] = (hosts.popen(host, command, env=env, stdout=log, stderr=log, start_new_session=True), log)
        for host, (agent, log) in agents.items():
            try:
                agent.wait(timeout=240)
            finally:
                log.close()
        outputs = {host: (tmp_path / f"{host}.log").read_text()[-4000:] for host in agents}
        assert all(agent.returncode == 0 for agent, _ in agents.values()), outputs
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [(r["rank"], r["size"], r["host"], r["local_rank"], r["local_size"]) for r in reports] == \
        [(0, 4, "h1", 0, 2), (1, 4, "h1", 1, 2), (2, 4, "h2", 0, 2), (3, 4, "h2", 1, 2)], reports
