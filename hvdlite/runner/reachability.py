"""Before a job starts on other hosts: every host's name resolves and the launcher reaches it, checked for all hosts
at once, each within a few seconds. Without this, a misspelled host name or a host that is down leaves mpiexec
waiting for a proxy that never calls back (minutes, or forever)."""
import concurrent.futures
import socket
import subprocess

CHECK_SECONDS = 10.0  # per host, all hosts in parallel
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def this_host_names():
    """Names and addresses by which this host may be listed."""
    names = {socket.gethostname(), socket.getfqdn(), *_LOCAL_NAMES}
    try:
        names.update(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return names


def is_this_host(name, local_names=None):
    return name in (local_names if local_names is not None else this_host_names())


def first_answering(candidates, seconds=3):
    """The first (host, port) of ``candidates`` that accepts a TCP connection, tried in order (``seconds`` each);
    None when none does."""
    for host, port in candidates:
        try:
            with socket.create_connection((host, port), timeout=seconds):
                return host, port
        except OSError:
            continue
    return None


def launcher_probe(launcher_exec, host, ssh_args=()):
    """argv that runs `true` on host the way mpiexec will start its proxy there (ssh unless a launcher is given;
    ssh_args, such as -p PORT, go to either)."""
    if launcher_exec:
        return [launcher_exec, *ssh_args, host, "true"]
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(CHECK_SECONDS) // 2}", *ssh_args, host,
            "true"]


def _problem(host, launcher_exec, timeout, ssh_args):
    try:
        socket.getaddrinfo(host, None)
    except OSError as error:
        return f"host {host!r} does not resolve ({error.strerror or error}): is the name spelled right?"
    argv = launcher_probe(launcher_exec, host, ssh_args)
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"host {host!r} did not answer within {timeout:g} s ({' '.join(argv)}): is it up and reachable?"
    except OSError as error:
        return f"cannot run {argv[0]!r} to reach host {host!r}: {error}"
    if result.returncode != 0:
        said = result.stdout.strip().splitlines()[-1:] or ["no output"]
        return f"host {host!r} is unreachable: `{' '.join(argv)}` exited with {result.returncode}: {said[0]}"
    return None


def unreachable_hosts(names, launcher_exec=None, timeout=CHECK_SECONDS, ssh_args=()):
    """[problem text] for every host other than this one that does not resolve or that the launcher cannot reach."""
    return list(host_problems(names, launcher_exec, timeout, ssh_args).values())


def host_problems(names, launcher_exec=None, timeout=CHECK_SECONDS, ssh_args=()):
    """{host: problem text} for the hosts other than this one that do not resolve or answer through the launcher."""
    local = this_host_names()
    remote = [name for name in dict.fromkeys(names) if not is_this_host(name, local)]
    if not remote:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(remote))) as pool:
        problems = pool.map(lambda host: _problem(host, launcher_exec, timeout, ssh_args), remote)
    return {host: problem for host, problem in zip(remote, problems) if problem}
