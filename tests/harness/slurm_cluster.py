"""A real Slurm (Debian's slurm-wlm: slurmctld, slurmd, srun, sbatch, scancel) on simulated hosts, for tests of jobs
that Slurm schedules: the controller on the first host, a slurmd on every host (each under its host's name), and
one munged for them all on this machine (the hosts share its files, so its socket reaches every host). The
configuration, spool folders, logs and munge's key live in a folder of the cluster's own; nothing of the machine's
own Slurm or munge (if any) is read or touched.

    with SimulatedHosts(2) as hosts, SlurmCluster(hosts) as slurm:
        slurm.run("h1", ["srun", "-N", "2", "--ntasks-per-node", "2", "--mpi=pmi2", "hostname"], timeout=60)

The daemons end on exit (and with the hosts: SimulatedHosts ends every process in them).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from hvdlite.testing.simulated_hosts import mount_cgroups_command

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
CPUS_PER_HOST = 4  # what each slurmd says it has (SlurmdParameters=config_overrides: the real count is not checked)

_CONFIG = """\
ClusterName=hvdlite-test
SlurmctldHost={controller}({controller_address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation={folder}/state
SlurmctldPidFile={folder}/slurmctld.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmdSpoolDir={folder}/spool-%n
SlurmdLogFile={folder}/slurmd-%n.log
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
MessageTimeout=10
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def missing():
    """Why a Slurm cluster cannot be made here, or None."""
    for program in (MUNGED, SLURMCTLD, SLURMD, shutil.which("srun"), shutil.which("sbatch")):
        if not program or not os.path.exists(program):
            return "needs Slurm and munge (apt-get install slurmctld slurmd slurm-client munge)"
    return None


class SlurmCluster:
    def __init__(self, hosts, names=None):
        self.hosts = hosts
        self.names = list(names or hosts.names)
        self.folder = None
        self.config = None
        self._munged = None

    def env(self, **extra):
        """This process's environment with the cluster's configuration (SLURM_CONF) for Slurm's commands."""
        return dict(os.environ, SLURM_CONF=self.config, **extra)

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for name in self.names:
            self._signal_pid_file(f"slurmd-{name}.pid")
        self._signal_pid_file("slurmctld.pid")
        if self._munged:
            self._munged.terminate()
            try:
                self._munged.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._munged.kill()
            self._munged = None
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _signal_pid_file(self, name):
        try:
            with open(os.path.join(self.folder, name)) as stream:
                os.kill(int(stream.read().strip()), signal.SIGKILL)
        except (OSError, ValueError, TypeError):
            pass

    def _start(self):
        self.folder = tempfile.mkdtemp(prefix="hvdlite-slurm-")
        os.chmod(self.folder, 0o755)
        key = os.path.join(self.folder, "munge.key")
        with open(key, "wb") as stream:
            stream.write(os.urandom(1024))
        os.chmod(key, 0o400)
        socket_path = os.path.join(self.folder, "munge.socket")
        # --force: munged runs as root here, and its folders are not the ones its package made.
        self._munged = subprocess.Popen(
            [MUNGED, "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
             f"--pid-file={self.folder}/munged.pid", f"--log-file={self.folder}/munged.log",
             f"--seed-file={self.folder}/munged.seed"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_for(lambda: os.path.exists(socket_path), "munged's socket")
        nodes = "\n".join(f"NodeName={name} NodeAddr={self.hosts.address(name)} CPUs={CPUS_PER_HOST} "
                          f"RealMemory=1000 State=UNKNOWN" for name in self.names)
        controller = self.names[0]
        self.config = os.path.join(self.folder, "slurm.conf")
        with open(self.config, "w") as stream:
            stream.write(_CONFIG.format(controller=controller, controller_address=self.hosts.address(controller),
                                        folder=self.folder, nodes=nodes))
        with open(os.path.join(self.folder, "cgroup.conf"), "w") as stream:
            # Beside slurm.conf, where Slurm reads it. Where the machine has cgroup v2, Slurm's plugin would otherwise
            # ask systemd (which runs in no simulated host) for a scope.
            stream.write("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
        os.makedirs(os.path.join(self.folder, "state"))
        env = self.env()
        # -D: in the foreground, so that each is a process of its host that the hosts' teardown also ends.
        self.hosts.popen(controller, [SLURMCTLD, "-D", "-i", "-f", self.config], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for name in self.names:
            os.makedirs(os.path.join(self.folder, f"spool-{name}"))
            # slurmd needs the cgroup file system (its cgroup plugin loads whatever the plugins in use), which
            # `ip netns exec` hides under a /sys of the namespace's own: the machine's hierarchies are mounted again,
            # in the host's own mount namespace only.
            self.hosts.popen(name, ["sh", "-c", mount_cgroups_command() + ' && exec "$@"',
                                    "slurmd", SLURMD, "-D", "-N", name, "-f", self.config], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_for(self._all_idle, "every node idle in sinfo", seconds=60)

    def _all_idle(self):
        result = self.run(self.names[0], ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30)
        states = dict(line.split() for line in result.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(name) == "idle" for name in self.names)

    def _wait_for(self, condition, what, seconds=20):
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm test cluster: no {what} after {seconds} s\n{self.logs()}")
            time.sleep(0.2)

    def run(self, host, command, timeout, env=None):
        """Runs a command (srun, sbatch, squeue, ...) on host with the cluster's configuration."""
        return self.hosts.run(host, command, timeout=timeout, env=env or self.env())

    def logs(self):
        """The daemons' logs, the last lines of each (for a failing test's message)."""
        text = []
        for name in sorted(os.listdir(self.folder or "/nonexistent")) if self.folder else []:
            if name.endswith(".log"):
                with open(os.path.join(self.folder, name), errors="replace") as stream:
                    text.append(f"--- {name}\n" + "".join(stream.readlines()[-20:]))
        return "\n".join(text)
