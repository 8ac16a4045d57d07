"""hvdliterun across hosts whose processes start with a clean environment, as ssh starts them: a job launched
from a third host onto two simulated hosts (harness/simulated_hosts.py; needs root) through a launcher program that
clears the environment before it enters the host. Every rank still gets the user's settings and the variables the
launcher itself sets (its address, the job's marker, the elastic job and restart number), lands where -H puts it,
knows its host's ranks and all-reduces correctly. Run with MPICH here and with Open MPI by `make test-openmpi`: hydra sends the environment along by
itself, Open MPI only the variables it is told to (-x)."""
import os
import sys
import textwrap

import pytest

from harness.processes import QUIET_THREADS, venv_tool
from harness.simulated_hosts import SimulatedHosts, available

VARIABLES = ("HVDLITE_CYCLE_TIME", "HVDLITE_LAUNCHER", "HVDLITE_JOB_ID", "HVDLITE_ELASTIC_JOB",
             "HVDLITE_ELASTIC_RESTART")

JOB = f"""
import os, socket, sys
import numpy as np
import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
correct = True
for count in (1000, 1 << 20):  # one message, and one that the core splits between hosts and within them
    out = hvd.allreduce(np.arange(count, dtype=np.float64) * (rank + 1), name=f"x{{count}}", op=hvd.Sum)
    correct &= bool(np.array_equal(out, np.arange(count, dtype=np.float64) * sum(range(1, size + 1))))
with open(os.path.join(sys.argv[1], f"rank{{rank}}"), "w") as report:  # the hosts share this machine's files
    print(rank, socket.gethostname(), f"{{hvd.local_rank()}}/{{hvd.local_size()}}",
          f"{{hvd.cross_rank()}}/{{hvd.cross_size()}}", correct,
          *[os.environ.get(name, "-") for name in {VARIABLES!r}], file=report)
hvd.shutdown()
"""


def clean_launcher(hosts, folder):
    """A launcher program that starts what it is given in a host with an environment as bare as ssh's."""
    path = folder / "ssh-like"
    path.write_text(f"#!/bin/sh\nexec env -i PATH=/usr/bin:/bin HOME=\"$HOME\" {hosts.launcher_exec} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def test_ranks_on_other_hosts_get_the_settings_and_the_launchers_variables(tmp_path):
    problem = available()
    if problem:
        pytest.fail(f"this test needs simulated hosts: {problem}")
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    env = dict(os.environ, **QUIET_THREADS)
    with SimulatedHosts(3) as hosts:
        result = hosts.run("h3", [venv_tool("hvdliterun"), "--launcher-exec", clean_launcher(hosts, tmp_path),
                                  "-np", "4", "-H", "h1:2,h2:2", "--max-restarts", "1", "--cycle-time-ms", "3",
                                  sys.executable, str(tmp_path / "job.py"), str(tmp_path)],
                           timeout=120, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-6000:]
    seen = [(tmp_path / f"rank{rank}").read_text().split() for rank in range(4)]
    assert [report[:5] for report in seen] == [["0", "h1", "0/2", "0/2", "True"], ["1", "h1", "1/2", "0/2", "True"],
                                               ["2", "h2", "0/2", "1/2", "True"], ["3", "h2", "1/2", "1/2", "True"]]
    values = [dict(zip(VARIABLES, report[5:])) for report in seen]
    for rank, got in enumerate(values):
        missing = [name for name, value in got.items() if value == "-"]
        assert not missing, f"rank {rank} lacks {missing}"
    assert all(got == values[0] for got in values), values  # the same job, the same start, the same launcher
    assert values[0]["HVDLITE_CYCLE_TIME"] == "3" and values[0]["HVDLITE_ELASTIC_RESTART"] == "0"
