"""The Kubeflow MPI Operator's contract (MPIJob v2beta1), on simulated hosts standing in for pods (harness/pods.py:
each host one pod, a container of the MPIJob image running there), since no Kubernetes runs here. What the operator
does is done by the test, as the operator does it:

- worker pods run the image's sshd as its non-root user (`sshd -De -f /home/hvd/.sshd_config`, port 2222), with
  the job's key pair mounted read-only at sshAuthMountPath (/home/hvd/.ssh: id_rsa, id_rsa.pub, authorized_keys);
- the launcher pod gets /etc/mpi/hostfile (Open MPI's `host slots=N` by default, `host:N` for mpiImplementation
  MPICH or Intel) and /etc/mpi/discover_hosts.sh (the running workers' names, one a line), and runs
  `hvdliterun ... --hostfile /etc/mpi/hostfile` or, elastic, `--host-discovery-script /etc/mpi/discover_hosts.sh`;
- a worker pod deleted is gone with every process in it, and the discovery script no longer lists it; a new one
  takes its name again and is listed again.

Not tested here: the operator itself (its controller, the Secret and ConfigMap it writes, launcherCreationPolicy's
wait, restart policies), Kubernetes' DNS and networking between pods; examples/kubernetes/*.yaml are checked
against the CRD's schema (tests/launcher/test_mpijob_manifests.py).
"""
import os
import pathlib
import subprocess
import time

import pytest

from harness.launch_programs import PLACED, REPORT
from harness.pods import Pods, missing as pods_missing, own_folder
from harness.processes import TESTS_DIR
from hvdlite.testing.simulated_hosts import hosts_for_tests

pytestmark = [pytest.mark.simulated_hosts, pytest.mark.mpijob_image]

IMAGE = os.environ.get("HVDLITE_MPIJOB_IMAGE", "hvdlite:mpijob")
SSH = "/home/hvd/.ssh"   # the examples' sshAuthMountPath
WORKERS = ["h1", "h2"]
SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/hvd/.sshd_config"]


WORKER_SCRIPTS = os.path.join(TESTS_DIR, "elastic", "workers")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two worker pods running sshd, on h1 and h2; h3 is where launcher pods run. Every pod mounts the key pair, a
    volume all of them share at /work (as a job's shared volume; the tests' programs and reports go there) and the
    elastic test's worker scripts at /opt/workers. Yields (pods, the volumes, {host: worker pod})."""
    problem = pods_missing()
    if problem:
        pytest.fail(f"the MPIJob tests {problem}")
    if subprocess.run(["podman", "image", "exists", IMAGE]).returncode != 0:
        pytest.fail(f"the MPIJob tests need the image {IMAGE}: make image-mpijob")
    secret = tmp_path_factory.mktemp("ssh-secret")
    # The operator's Secret: one key pair (ECDSA, as the operator makes it) under the names OpenSSH looks for.
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-C", "mpijob", "-f",
                    str(secret / "id_rsa")], check=True)
    (secret / "authorized_keys").write_text((secret / "id_rsa.pub").read_text())
    own_folder(secret, mode=0o700)
    shared = tmp_path_factory.mktemp("shared")
    own_folder(shared, mode=0o777)
    volumes = {str(secret): f"{SSH}:ro", str(shared): "/work", WORKER_SCRIPTS: "/opt/workers:ro"}
    with hosts_for_tests(3, "the MPIJob tests") as hosts, Pods(hosts, IMAGE) as pods:
        workers = {host: pods.start(host, SSHD, mounts=volumes) for host in WORKERS}
        yield pods, volumes, workers


def _etc_mpi(folder, hostfile_lines, discovered):
    folder.mkdir(exist_ok=True)
    (folder / "hostfile").write_text("".join(line + "\n" for line in hostfile_lines))
    _list_workers(folder, discovered)
    own_folder(folder)
    return folder


def _list_workers(folder, names):
    """discover_hosts.sh as the operator writes it (swapped whole, as a ConfigMap's files are)."""
    script = folder / "discover_hosts.sh.new"
    script.write_text("#!/bin/sh\n" + "".join(f"echo {name}\n" for name in names))
    script.chmod(0o755)
    os.replace(script, folder / "discover_hosts.sh")


def _work_folder(volumes, name):
    """A folder of the shared volume: (its path here, its path in the pods)."""
    shared = next(source for source, target in volumes.items() if target == "/work")
    work = os.path.join(shared, name)
    os.mkdir(work)
    own_folder(work, mode=0o777)
    return pathlib.Path(work), f"/work/{name}"


@pytest.mark.parametrize("implementation,hostfile", [("OpenMPI", ["h1 slots=2", "h2 slots=2"]),
                                                     ("MPICH", ["h1:2", "h2:2"])])
def test_the_launcher_pod_runs_the_job_on_the_operators_hostfile(cluster, tmp_path, implementation, hostfile):
    """hvdliterun -np 4 --hostfile /etc/mpi/hostfile in the launcher pod, as the non-root user, the hostfile in the
    format the operator writes for that mpiImplementation: ranks start in the worker pods through their sshd on
    port 2222 with the mounted key, two per pod, and all-reduce right."""
    pods, volumes, _ = cluster
    etc_mpi = _etc_mpi(tmp_path / "etc-mpi", hostfile, WORKERS)
    work, in_pods = _work_folder(volumes, f"placed-{implementation}")
    (work / "report.py").write_text(REPORT)
    result = pods.run("h3", ["hvdliterun", "-np", "4", "--hostfile", "/etc/mpi/hostfile", "python",
                             f"{in_pods}/report.py", in_pods], timeout=180,
                      mounts={**volumes, str(etc_mpi): "/etc/mpi:ro"})
    assert result.returncode == 0, result.stdout[-6000:]
    reports = [(work / f"rank{rank}").read_text().split()[:6] for rank in range(4)]
    assert reports == PLACED, result.stdout[-3000:]


def _lines(path):
    return path.read_text().split("\n")[:-1] if path.exists() else []


def _wait_for(condition, what, process, timeout=150):
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the job ended while waiting for {what}:\n" + process.stdout.read()[-6000:])
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)


def test_an_elastic_job_follows_the_operators_discovery_script_as_pods_go_and_come(cluster, tmp_path):
    """The elastic torch worker under `hvdliterun --host-discovery-script /etc/mpi/discover_hosts.sh --slots 2`
    (the script names the pods only): 4 ranks on both pods; h2's pod deleted (its ranks killed with it) and no
    longer listed, the job goes on from its last commit on h1's 2 ranks; a new pod on h2 listed again, the job grows
    back to 4 ranks at a commit, and every sample of each epoch is trained (but the step the deletion cut short
    on h2, whose all-reduce may have trained it)."""
    pods, volumes, workers = cluster
    etc_mpi = _etc_mpi(tmp_path / "etc-mpi", [], WORKERS)
    work, in_pods = _work_folder(volumes, "elastic")
    mounts = {**volumes, str(etc_mpi): "/etc/mpi:ro"}
    process = pods.popen("h3", ["hvdliterun", "--min-np", "2", "--max-np", "4", "--slots", "2",
                                "--host-discovery-script", "/etc/mpi/discover_hosts.sh",
                                "--blacklist-cooldown-range", "1", "2", "python", "/opt/workers/torch_train.py",
                                "--out", f"{in_pods}/elastic", "--epochs", "2", "--step-seconds", "0.1"],
                         mounts=mounts, env={"HVDLITE_PROGRESS_TIMEOUT_SECONDS": "5"})
    try:
        _wait_for(lambda: len(_lines(work / "elastic.samples")) > 40, "10 steps on 4 ranks", process)
        _list_workers(etc_mpi, ["h1"])
        pods.delete(workers["h2"])
        _wait_for(lambda: len(_lines(work / "elastic.resumed")) >= 6, "the start on h1's 2 ranks", process)
        steps_before = len(_lines(work / "elastic.samples"))
        _wait_for(lambda: len(_lines(work / "elastic.samples")) > steps_before + 20, "10 steps on 2 ranks", process)
        workers["h2"] = pods.start("h2", SSHD, mounts=volumes)
        _list_workers(etc_mpi, WORKERS)
        output, _ = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
            output = process.communicate()[0]
    assert process.returncode == 0, output[-6000:]
    starts = sorted(tuple(map(int, line.split()))[:3] for line in _lines(work / "elastic.resumed"))
    sizes = {}
    for restart, _rank, size in starts:
        sizes.setdefault(restart, set()).add(size)
    assert list(sizes.values())[0] == {4} and {2} in sizes.values() and list(sizes.values())[-1] == {4}, starts
    seen = {}
    for line in _lines(work / "elastic.samples"):
        epoch, _step, _rank, ids = line.split()
        seen.setdefault(int(epoch), set()).update(map(int, ids.split(",")))
    missing = {epoch: 1792 - len(ids) for epoch, ids in seen.items()}
    # The deleted pod's 2 ranks may die after their step's all-reduce (their batches trained) and before they log
    # it: at most their 2 batches of 32 unlogged, in the epoch of the deletion; every other sample logged.
    assert sorted(seen) == [0, 1] and sum(missing.values()) <= 64 and min(missing.values()) == 0, missing
