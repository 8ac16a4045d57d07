"""Containers of an image as the pods of a Kubernetes job, on simulated hosts (hvdlite/testing/simulated_hosts.py): each
host is one pod, its network namespace the pod's network and its name the pod's host name, and a container runs
there with podman (`--network host` inside the host's namespace, every host's name in its /etc/hosts, as the
cluster's DNS would resolve the pods' names), the folders given mounted as a pod's volumes are. Needs root and
podman (docker/setup-podman.sh).

    with SimulatedHosts(3) as hosts, Pods(hosts, "hvdlite:mpijob") as pods:
        pods.start("h1", ["/usr/sbin/sshd", "-De", "-f", "/home/hvd/.sshd_config"], mounts={key_folder: ".ssh"})
        pods.run("h3", ["hvdliterun", ...], mounts=..., timeout=120)

Every container is removed on exit.
"""
import os
import shlex
import shutil
import subprocess

from hvdlite.testing.simulated_hosts import mount_cgroups_command


def missing():
    """Why pods cannot be run here, or None."""
    return None if shutil.which("podman") else "needs podman (apt-get install podman; docker/setup-podman.sh)"


class Pods:
    def __init__(self, hosts, image):
        self.hosts, self.image = hosts, image
        self._started = []  # container names
        self._count = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for name in self._started:
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self._started = []

    def _argv(self, host, command, mounts, env, detach):
        self._count += 1
        name = f"{self.hosts.namespace(host)}-pod{self._count}"
        podman = ["podman", "run", "--rm", "--name", name, "--network", "host", "--hostname", host,
                  *[f"--add-host={other}:{self.hosts.address(other)}" for other in self.hosts.names]]
        for source, target in (mounts or {}).items():
            podman += ["-v", f"{source}:{target}"]
        for variable, value in (env or {}).items():
            podman += ["-e", f"{variable}={value}"]
        podman += ["-d"] if detach else []
        podman += [self.image, *command]
        self._started.append(name)
        return name, ["sh", "-c", f"{mount_cgroups_command()} && exec {shlex.join(podman)}"]

    def start(self, host, command, mounts=None, env=None):
        """Starts a pod's container on host, in the background; returns its name."""
        name, argv = self._argv(host, command, mounts, env, detach=True)
        started = self.hosts.run(host, argv, timeout=120)
        if started.returncode != 0:
            raise RuntimeError(f"pod {name} on {host} did not start:\n{started.stdout[-3000:]}")
        return name

    def run(self, host, command, timeout, mounts=None, env=None):
        """Runs a pod's container on host to its end; returns the CompletedProcess (output together, text)."""
        _, argv = self._argv(host, command, mounts, env, detach=False)
        return self.hosts.run(host, argv, timeout=timeout)

    def popen(self, host, command, mounts=None, env=None):
        """Starts a pod's container on host, its output piped back; returns the Popen."""
        _, argv = self._argv(host, command, mounts, env, detach=False)
        return self.hosts.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def delete(self, name):
        """Deletes a pod: its container and every process in it, at once (as a node lost, or kubectl delete
        --grace-period=0)."""
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)

    def logs(self, name):
        result = subprocess.run(["podman", "logs", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return result.stdout


def own_folder(path, uid=1000, mode=0o755):
    """Makes path (and what is in it) belong to uid, as a volume a pod's non-root user reads or writes."""
    os.chmod(path, mode)
    for root, folders, files in os.walk(path):
        for entry in [root] + [os.path.join(root, f) for f in folders + files]:
            os.chown(entry, uid, uid)
