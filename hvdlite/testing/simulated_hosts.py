"""Several hosts on this machine, for tests and benchmarks of what crosses a network.

Each host is a Linux network namespace with its own address on a private subnet, joined to the others by a
bridge that lives in a namespace of its own (nothing is added to the machine's own network), with a hosts file
naming every host, and a hostname of its own: a command runs in a host through ``ip netns exec`` and
``unshare --uts``, which sets the hostname for that command and everything it starts. Each host link may be
shaped to a rate with ``tc tbf``, in both directions (the host's egress and the bridge port's), like a full-duplex
NIC. A host may also get a decoy interface that reaches nothing, with the same address on every host (as docker0
on Docker hosts). Ranks on different hosts talk only over TCP through the bridge; ranks on one host share its
memory, as on a real node (MPI learns which ranks share a host from its launcher: one proxy per host).

MPI reaches a host through a launcher program, as it would through ssh: ``launcher_exec`` is a script taking ssh's
arguments (``[-x] host command...``) that runs the command in that host with a bare environment, as ssh does, and
relays its output. Needs root (CI runs as root).

    with SimulatedHosts(2, rate_mbit=1000) as hosts:
        hosts.run("h1", ["hvdliterun", "-np", "4", "-H", "h1:2,h2:2", "--launcher-exec", hosts.launcher_exec, ...])

Everything is torn down on exit, after a failure too; namespaces a killed run left behind (their owner process is
gone) are removed by the next run.
"""
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "hvdl"        # namespace names: hvdl<owner pid>-h1 ..., hvdl<owner pid>-sw (at most 15 characters)
SUBNET = "10.231.7"    # a private /24 that exists only inside these namespaces
# A decoy interface's address, the same on every host (as docker0's is on every Docker host), reaching nothing.
DECOY_ADDRESS = "10.231.8.1/24"
NETNS_ETC = "/etc/netns"
# The launcher program: as ssh, it runs the command in the host with a bare environment (what MPI does not pass
# along itself is then missing, as on a cluster), and relays its output as the ssh client does, keeping the
# launcher's environment itself (ending it cuts the command off from the launcher's output).
_SSH_LIKE = """#!/bin/bash
set -o pipefail
env -i PATH=/usr/bin:/bin HOME="$HOME" {entry} "$@" 2> >(cat >&2) | cat
"""


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def available():
    """Why simulated hosts cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces)"
    for tool in ("ip", "tc", "unshare", "hostname"):
        if not shutil.which(tool):
            return f"simulated hosts need {tool!r} (Debian: iproute2, util-linux, hostname)"
    return ""


def hosts_for_tests(count, what, **options):
    """SimulatedHosts(count) for a module's tests: where they cannot be made the test fails saying why (what: what
    needs them), never skips."""
    problem = available()
    if problem:
        import pytest
        pytest.fail(f"{what} need simulated hosts: {problem}")
    return SimulatedHosts(count, **options)


def hosts_for_bench(count, what, **options):
    """SimulatedHosts(count) for a benchmark's driver: where they cannot be made it ends saying why (what: the
    benchmark)."""
    problem = available()
    if problem:
        raise SystemExit(f"{what}: {problem}")
    return SimulatedHosts(count, **options)


def _owner_alive(namespace):
    pid = namespace[len(PREFIX):].split("-", 1)[0]
    return pid.isdigit() and os.path.exists(f"/proc/{pid}")


def _delete_namespace(namespace):
    # A namespace lives on while processes are in it: end them first.
    pids = _ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    _ip("netns", "del", namespace, check=False)
    shutil.rmtree(os.path.join(NETNS_ETC, namespace), ignore_errors=True)


def remove_leftovers():
    """Deletes namespaces of earlier runs whose owner process is gone (a run killed before its teardown)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX) and not _owner_alive(name):
            _delete_namespace(name)


class SimulatedHosts:
    def __init__(self, count, rate_mbit=None, decoy=None):
        """decoy: the name of a second interface given to every host, up, with DECOY_ADDRESS on each: an
        interface that MPI may take for a way to the other hosts, as a cluster's docker0 is."""
        if count < 1 or count > 200:
            raise ValueError(f"1 to 200 hosts, not {count}")
        self.names = [f"h{i}" for i in range(1, count + 1)]
        self.rate_mbit = rate_mbit
        self.decoy = decoy
        self._tag = f"{PREFIX}{os.getpid()}"
        self._made = []
        self._folder = None
        self.launcher_exec = None

    def namespace(self, host):
        return f"{self._tag}-{host}"

    def address(self, host):
        return f"{SUBNET}.{self.names.index(host) + 1}"

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def up(self):
        problem = available()
        if problem:
            raise RuntimeError(problem)
        remove_leftovers()
        self.down()  # this process's own, should a previous up() have failed half-way
        try:
            self._make()
        except BaseException:
            self.down()
            raise

    def _make(self):
        switch = f"{self._tag}-sw"
        _ip("netns", "add", switch)
        self._made.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{self.address(h)} {h}\n" for h in self.names)
        for index, host in enumerate(self.names, 1):
            ns = self.namespace(host)
            _ip("netns", "add", ns)
            self._made.append(ns)
            os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
            with open(os.path.join(NETNS_ETC, ns, "hosts"), "w") as stream:
                stream.write(hosts_file)
            with open(os.path.join(NETNS_ETC, ns, "resolv.conf"), "w") as stream:
                stream.write("# no name server: the hosts file names every host\n")
            port = f"p{index}"
            _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.decoy:  # a bridge with one port, its peer in the same host: up, with a carrier, going nowhere
                _ip("-n", ns, "link", "add", self.decoy, "type", "bridge")
                _ip("-n", ns, "link", "add", "decoy-port", "type", "veth", "peer", "name", "decoy-peer")
                _ip("-n", ns, "link", "set", "decoy-port", "master", self.decoy)
                for device in ("decoy-port", "decoy-peer", self.decoy):
                    _ip("-n", ns, "link", "set", device, "up")
                _ip("-n", ns, "addr", "add", DECOY_ADDRESS, "dev", self.decoy)
            if self.rate_mbit:
                self._shape(ns, "eth0")
                self._shape(switch, port)
        self._folder = tempfile.mkdtemp(prefix="hvdlite-hosts-")
        entry = os.path.join(self._folder, "host-enter")
        with open(entry, "w") as stream:
            stream.write(self._entry_script())
        self.launcher_exec = os.path.join(self._folder, "host-exec")
        with open(self.launcher_exec, "w") as stream:
            stream.write(_SSH_LIKE.format(entry=entry))
        for path in (entry, self.launcher_exec):
            os.chmod(path, 0o755)
        self._wait_reachable()

    def _shape(self, namespace, device):
        # A bucket of a few milliseconds at the rate: TCP fills the link without bursts above it.
        burst_kbit = max(64, self.rate_mbit * 2)
        subprocess.run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf", "rate",
                        f"{self.rate_mbit}mbit", "burst", f"{burst_kbit}kbit", "latency", "100ms"],
                       check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _entry_script(self):
        # ssh's calling convention: options, the host, then the command words, joined and run by a shell there.
        return f"""#!/bin/sh
# Runs a command in one of the simulated hosts, as `ssh HOST COMMAND...` would.
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"; shift
case "$host" in
{"".join(f"  {h}) address={self.address(h)} ;;{chr(10)}" for h in self.names)}  *) echo "ssh: Could not resolve hostname $host: Name or service not known" >&2; exit 255 ;;
esac
# Like ssh, reach the host over the network first: a host whose link is down does not answer.
if ! {sys.executable} -c '{_CONNECT_PROBE}' "$address" 3; then
  echo "ssh: connect to host $host port 22: Connection timed out" >&2; exit 255
fi
exec ip netns exec "{self._tag}-$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
"""

    def argv(self, host, command):
        """argv that runs command (a list) in host."""
        return ["ip", "netns", "exec", self.namespace(host), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host, *command]

    def popen(self, host, command, **kwargs):
        return subprocess.Popen(self.argv(host, command), **kwargs)

    def run(self, host, command, timeout, env=None, **kwargs):
        """Runs command in host; returns the CompletedProcess (stdout and stderr together, text)."""
        process = self.popen(host, command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, **kwargs)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_processes()
            output, _ = process.communicate()
            raise TimeoutError(f"timed out after {timeout} s: {shlex.join(command)}\n{output[-6000:]}") from None
        return subprocess.CompletedProcess(command, process.returncode, output, None)

    def pids(self, host):
        return [int(p) for p in _ip("netns", "pids", self.namespace(host), check=False).stdout.split()]

    def kill_processes(self, host=None):
        """SIGKILLs every process in host (all hosts when None)."""
        for name in [host] if host else self.names:
            for pid in self.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def set_link(self, host, up):
        """Takes host's link down (a host lost to the network) or up again."""
        _ip("-n", self.namespace(host), "link", "set", "eth0", "up" if up else "down")

    def _wait_reachable(self):
        # A fresh bridge port takes a moment to forward; the first host must reach the last before use.
        deadline = time.monotonic() + 10
        last = self.address(self.names[-1])
        while True:
            ping = subprocess.run(self.argv(self.names[0], [sys.executable, "-c", _CONNECT_PROBE, last, "0.5"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if ping.returncode == 0 or len(self.names) == 1:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"simulated host {self.names[0]} cannot reach {last}")
            time.sleep(0.1)

    def down(self):
        for namespace in reversed(self._made):
            _delete_namespace(namespace)
        self._made = []
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def mount_cgroups_command():
    """Shell commands that mount this machine's cgroup hierarchies (v1 or v2) at /sys/fs/cgroup again, for a command
    in a host that needs them (slurmd, a container runtime): `ip netns exec` gives each host a /sys of its own,
    without them. Run in the host's own mount namespace, they change nothing outside it."""
    commands = []
    with open("/proc/self/mounts") as stream:
        for line in stream:
            source, target, kind, options = line.split()[:4]
            if not target.startswith("/sys/fs/cgroup"):
                continue
            if kind == "tmpfs" and target == "/sys/fs/cgroup":
                commands.append("mount -t tmpfs cgroup_root /sys/fs/cgroup")
            elif kind in ("cgroup", "cgroup2"):
                wanted = ",".join(o for o in options.split(",") if o not in ("rw", "relatime", "nosuid", "nodev",
                                                                             "noexec"))
                commands.append(f"mkdir -p {target} && mount -t {kind} {'-o ' + wanted if wanted else ''} "
                                f"{source} {target}")
    if not commands:
        raise RuntimeError("this machine has no cgroup file system at /sys/fs/cgroup, which slurmd needs")
    return " && ".join(commands)


# Succeeds when a TCP connection to the address (port 22, as ssh's) is refused or accepted (the address answers);
# fails on a timeout or no route. Arguments: address, seconds.
_CONNECT_PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], 22), timeout=float(sys.argv[2])).close()
except ConnectionRefusedError:
    pass
except OSError:
    sys.exit(1)
"""


# MPICH's network layers (netmods) over TCP, as a job selects them through its environment.
NETWORK_LAYERS = {
    "ofi": {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"},
    "ucx": {"MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "self,tcp"},
}
PLACEMENTS = ("blocks", "round-robin")


def parse_layout(text):
    """'2x2' -> (2 hosts, 2 ranks per host)."""
    hosts, _, per_host = text.partition("x")
    if not (hosts.isdigit() and per_host.isdigit() and int(hosts) >= 1 and int(per_host) >= 1):
        raise ValueError(f"expected HOSTSxRANKS_PER_HOST such as 2x2, got {text!r}")
    return int(hosts), int(per_host)


def host_list(names, per_host, placement):
    """hydra's -hosts for ranks in blocks (h1:2,h2:2: ranks 0,1 on h1) or round-robin (h1:1,h2:1 cycled:
    ranks 0,2 on h1, ranks 1,3 on h2)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, not {placement!r}")
    slots = per_host if placement == "blocks" else 1
    return ",".join(f"{name}:{slots}" for name in names)


def mpiexec_argv(hosts, mpiexec, per_host, placement, program, env=(), count=None):
    """hydra's mpiexec running program on every host (the first count of them), per_host ranks each, placed as
    asked; env: (name, value)s set on every rank."""
    names = hosts.names[:count] if count else hosts.names
    argv = [mpiexec, "-n", str(len(names) * per_host), "-hosts", host_list(names, per_host, placement),
            "-launcher", "ssh", "-launcher-exec", hosts.launcher_exec]
    for name, value in env:
        argv += ["-genv", name, str(value)]
    return argv + list(program)


# Set by the test harness when a job runs across simulated hosts (multirank.py's --hosts), for tests to read.
LAYOUT_VARIABLE = "HVDLITE_TEST_HOSTS"          # HxP
PLACEMENT_VARIABLE = "HVDLITE_TEST_PLACEMENT"   # blocks or round-robin


def job_layout():
    """(hosts, ranks per host, placement) of the job this process is in, when it runs across simulated hosts;
    None on one host."""
    text = os.environ.get(LAYOUT_VARIABLE)
    if not text:
        return None
    count, per_host = parse_layout(text)
    return count, per_host, os.environ.get(PLACEMENT_VARIABLE, "blocks")


def expected_topology_here(rank, size):
    """expected_topology for this job: across simulated hosts as the harness laid it out, else all ranks on this
    host."""
    layout = job_layout()
    if layout:
        return expected_topology(rank, *layout)
    import socket
    return {"host": socket.gethostname(), "local_rank": rank, "local_size": size, "cross_rank": 0, "cross_size": 1}


def expected_topology(rank, count, per_host, placement):
    """Where rank runs: its host's name, local rank and cross rank (the host's index)."""
    host, local = (rank // per_host, rank % per_host) if placement == "blocks" else (rank % count, rank // count)
    return {"host": f"h{host + 1}", "local_rank": local, "local_size": per_host, "cross_rank": host,
            "cross_size": count}
