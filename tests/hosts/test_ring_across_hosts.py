"""The ring across hosts over hvdlite's own TCP connections (native/src/transport/ring_sockets.h), on simulated hosts
(network namespaces, needs root).

Fused batches of every kind of dtype and op, some tens of MiB (so the reduce-scatter's bounded window fills many times
and tensors are cut at chunk and window boundaries), on 3 hosts x 1 rank and 2 hosts x 2 ranks: on every rank equal to
the float64 reference, and bitwise equal to the same job whose ring crosses hosts over MPI's point-to-point (the same
chunks, the same reduction order), and then single tensors over 4 MiB, in place and not (within a host the share's
owner writes them into its peers' outputs, as the ring across hosts finishes them). Connections that cannot be opened (no such interface) leave the ring on MPI with a
warning naming why, and the job's results are the same.
"""
import os
import re
import sys
import textwrap

import pytest

from harness.processes import QUIET_THREADS, TESTS_DIR, venv_tool
from hvdlite.testing.simulated_hosts import NETWORK_LAYERS, hosts_for_tests

pytestmark = pytest.mark.simulated_hosts

JOB = f"""
import hashlib, sys
sys.path.insert(0, {TESTS_DIR!r})
import numpy as np
import hvdlite as hvd
from harness.numpy_groups import reduce_group_and_check

hvd.init()
rng = np.random.default_rng(7)  # the same sizes on every rank
digest = hashlib.sha256()
for dtype, op in (("float32", "sum"), ("float64", "sum"), ("float16", "sum"), ("bfloat16", "sum"), ("int32", "sum"),
                  ("float32", "min"), ("float32", "max"), ("float32", "average"), ("float32", "product")):
    sizes = [int(n) for n in rng.integers(1, 60_000, size=30)] + [1_000_003]
    for output in reduce_group_and_check(f"{{dtype}}.{{op}}", dtype, op, sizes, "the ring across hosts"):
        digest.update(output.tobytes())
# Single tensors over 4 MiB: within a host each share's owner writes it into its peers' outputs.
for dtype, op in (("float32", "sum"), ("float64", "max")):
    for in_place in (1, None):
        label = f"single.{{dtype}}.{{op}}.{{in_place}}"
        for output in reduce_group_and_check(label, dtype, op, [1_500_007], "the ring across hosts", in_place):
            digest.update(output.tobytes())
print(f"DIGEST {{hvd.rank()}} {{digest.hexdigest()}}", flush=True)
hvd.shutdown()
"""
TCP_IN_USE = "the ring across hosts runs over its own TCP connections"


@pytest.fixture(scope="module")
def hosts():
    with hosts_for_tests(3, "the ring across hosts' tests") as made:
        yield made


def run_job(hosts, tmp_path, host_list, np_, **variables):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = dict(os.environ, **QUIET_THREADS, **NETWORK_LAYERS["ofi"], HVDLITE_LOG_LEVEL="debug",
               HVDLITE_ALLREDUCE_ALGORITHM="hierarchical", HVDLITE_RING_SEGMENT_BYTES="65536", **variables)
    result = hosts.run("h1", [venv_tool("hvdliterun"), "--launcher-exec", hosts.launcher_exec, "-np", str(np_),
                              "-H", host_list, sys.executable, str(script)], timeout=300, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    digests = dict(re.findall(r"DIGEST (\d+) ([0-9a-f]{64})", result.stdout))  # ranks' lines may be spliced
    assert len(digests) == np_, result.stdout[-6000:]
    assert len(set(digests.values())) == 1, f"results differ between ranks: {digests}"
    return next(iter(digests.values())), result.stdout


@pytest.mark.parametrize("host_list,np_", [("h1:1,h2:1,h3:1", 3), ("h1:2,h2:2", 4)], ids=["3x1", "2x2"])
def test_results_equal_the_reference_and_the_ring_over_mpi_bitwise(hosts, tmp_path, host_list, np_):
    over_tcp, tcp_output = run_job(hosts, tmp_path, host_list, np_, HVDLITE_CROSS_HOST_TRANSPORT="tcp")
    over_mpi, mpi_output = run_job(hosts, tmp_path, host_list, np_, HVDLITE_CROSS_HOST_TRANSPORT="mpi")
    assert TCP_IN_USE in tcp_output, tcp_output[-6000:]
    assert TCP_IN_USE not in mpi_output and "runs over MPI" not in mpi_output, mpi_output[-6000:]
    assert over_tcp == over_mpi, "the TCP ring's results differ from the MPI ring's"


def test_connections_that_cannot_be_opened_leave_the_ring_on_mpi_with_a_warning(hosts, tmp_path):
    over_tcp, _ = run_job(hosts, tmp_path, "h1:1,h2:1,h3:1", 3)
    fallen_back, output = run_job(hosts, tmp_path, "h1:1,h2:1,h3:1", 3, HVDLITE_NETWORK_INTERFACES="nosuch0")
    assert TCP_IN_USE not in output, output[-6000:]
    assert output.count("the ring across hosts runs over MPI: its TCP connections could not be opened") == 1, output
    assert "no IPv4 address on interfaces nosuch0" in output, output[-6000:]
    assert fallen_back == over_tcp
