"""Real ssh servers (OpenSSH's sshd, Debian's openssh-server) in simulated hosts, for launches that go through ssh
itself: each listens on a port of the test's choosing and lets root in with one key made for the test, and the
client host's ssh trusts any host key (it sees its own /etc/ssh: `ip netns exec` puts /etc/netns/NS/ssh there).

    with SimulatedHosts(3) as hosts, SshServers(hosts, ["h1", "h2"], client="h3", port=2222) as ssh:
        hosts.run("h3", ["hvdliterun", "-p", "2222", "-i", ssh.key, "-H", "h1:1,h2:1", ...])

The servers end with the hosts (SimulatedHosts ends every process in them) or on exit, whichever comes first.
"""
import os
import shutil
import subprocess
import tempfile
import time

from hvdlite.testing.simulated_hosts import NETNS_ETC

SSHD = "/usr/sbin/sshd"

_SERVER_CONFIG = """\
Port {port}
ListenAddress 0.0.0.0
HostKey {folder}/host_key
PidFile none
AuthorizedKeysFile {folder}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
PrintMotd no
"""

# The client host's whole /etc/ssh while the test runs: any host key is taken, none is remembered.
_CLIENT_CONFIG = """\
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    GlobalKnownHostsFile /dev/null
    LogLevel ERROR
"""


def missing():
    """Why sshd cannot run here, or None."""
    for program in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not program or not os.path.exists(program):
            return "needs OpenSSH's server and client (apt-get install openssh-server openssh-client)"
    return None


class SshServers:
    def __init__(self, hosts, names, client, port):
        self.hosts, self.names, self.client, self.port = hosts, names, client, port
        self.key = None
        self._folder = None
        self._client_etc = os.path.join(NETNS_ETC, hosts.namespace(client), "ssh")
        self._servers = []

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self):
        self._folder = tempfile.mkdtemp(prefix="hvdlite-sshd-")
        self.key = os.path.join(self._folder, "client_key")
        for path in (self.key, os.path.join(self._folder, "host_key")):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
        shutil.copy(self.key + ".pub", os.path.join(self._folder, "authorized_keys"))
        config = os.path.join(self._folder, "sshd_config")
        with open(config, "w") as stream:
            stream.write(_SERVER_CONFIG.format(port=self.port, folder=self._folder))
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation folder
        os.makedirs(self._client_etc, exist_ok=True)
        with open(os.path.join(self._client_etc, "ssh_config"), "w") as stream:
            stream.write(_CLIENT_CONFIG)
        for name in self.names:
            self._servers.append(self.hosts.popen(name, [SSHD, "-D", "-e", "-f", config],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for name in self.names:
            self._wait_answering(name)

    def _wait_answering(self, name):
        deadline = time.monotonic() + 15
        while True:
            probe = self.hosts.run(self.client, ["ssh", "-o", "BatchMode=yes", "-p", str(self.port), "-i", self.key,
                                                 name, "true"], timeout=15)
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd in {name} does not let the test in: {probe.stdout[-2000:]}")
            time.sleep(0.2)

    def __exit__(self, *exc):
        for server in self._servers:
            server.kill()
            server.wait()
        self._servers = []
        shutil.rmtree(self._client_etc, ignore_errors=True)
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
