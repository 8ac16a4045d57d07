"""The mpiexec command line for a job, spelled for hydra (MPICH) or Open MPI. Pure functions: no processes."""
import os
import re

from .horovodrun_flags import OPENMPI_TCP_OPTIONS
from .hosts import host_list_text
from .mpiexec import FORK, HYDRA, OPENMPI, SLURM

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)*)?$")
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
_PYTHON_RANK = ["-m", "hvdlite.runner.python_rank"]


def abort_on_exception(command):
    """Runs a Python program as `python -m hvdlite.runner.python_rank program ...` (python_rank.py), which calls
    MPI_Abort on an uncaught exception or a non-zero sys.exit, as `python -m mpi4py` does. Anything else (not Python,
    interactive, already wrapped, flags we cannot read) is returned unchanged."""
    command = list(command)
    if not command or not _PYTHON_NAME.match(os.path.basename(command[0])):
        return command
    index = 1
    while index < len(command):
        arg = command[index]
        if arg in ("-m", "-c", "-") or not arg.startswith("-"):
            break  # the program: -m module, -c code, - (stdin) or a script path
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if not arg.startswith(("--", "-W", "-X")) and len(arg) > 2 and ("m" in arg or "c" in arg):
            return command  # combined short flags such as -um: leave them alone rather than guess
        index += 1
    else:
        return command  # no program: interactive or -V
    if command[index:index + 2] in (["-m", "mpi4py"], _PYTHON_RANK):
        return command
    return command[:index] + _PYTHON_RANK + command[index:]


def _hostfile_matches(flavour, hostfile):
    # hydra reads "host:N" lines, Open MPI "host slots=N"; a bare host list suits both.
    return hostfile.style == "bare" or hostfile.style == ("colon" if flavour == HYDRA else "slots")


def _open_mpi_mapping(binding):
    """Open MPI's options for where ranks go and what they are bound to: mapped by slot, so that each host's slots
    fill in the order given, as hydra fills them (with --oversubscribe alone Open MPI maps by core and put every
    rank of `-H a:1,b:1` on a), and more ranks than slots allowed, as hydra allows them."""
    binding = list(binding)
    if "--map-by" in binding:  # a policy of the binding's own (CPUs per rank): oversubscribing added to it
        binding[binding.index("--map-by") + 1] += ":OVERSUBSCRIBE"
        return binding
    return ["--map-by", "slot:OVERSUBSCRIBE", *binding]


def mpiexec_variables(flavour, ssh_args, launcher=None):
    """Variables for mpiexec itself (not the ranks) that give its launcher options: ssh (or the launcher program)
    ssh_args (-p PORT, -i FILE), which hydra reads from HYDRA_LAUNCHER_EXTRA_ARGS (Open MPI from an option:
    build_command); srun (SLURM) --cpu-bind=none, so that where Slurm binds tasks to CPUs the one process mpiexec
    starts on each host (which starts that host's ranks) is not bound to one CPU, as Open MPI asks for its own."""
    if flavour == HYDRA and launcher == SLURM:
        return {"HYDRA_LAUNCHER_EXTRA_ARGS": "--cpu-bind=none"}
    if flavour == OPENMPI and launcher == SLURM:
        return {"SLURM_CPU_BIND": "none"}
    return {"HYDRA_LAUNCHER_EXTRA_ARGS": " ".join(ssh_args)} if flavour == HYDRA and ssh_args else {}


def interface_variables(interfaces):
    """Variables that keep the ranks' traffic to the network interfaces named: MPICH's over libfabric's TCP
    providers (which take one), over UCX, NCCL's between hosts and hvdlite's own ring across hosts."""
    if not interfaces:
        return {}
    names = ",".join(interfaces)
    return {"FI_TCP_IFACE": interfaces[0], "FI_SOCKETS_IFACE": interfaces[0], "UCX_NET_DEVICES": names,
            "NCCL_SOCKET_IFNAME": names, "HVDLITE_NETWORK_INTERFACES": names}


def build_command(flavour, mpiexec, num_proc, program, env=None, hosts=None, hostfile=None, forward_env=(),
                  run_as_root=False, binding=(), launcher_exec=None, interfaces=(), mpi_args=(), ssh_args=(),
                  tcp_only=False, launcher=None):
    """mpiexec argv that starts num_proc copies of program with env (name -> value) set on every rank.

    hosts: list of Host; hostfile: a Hostfile (passed through when its style suits the flavour, else inlined).
    forward_env: names of variables to forward as they are (Open MPI does not forward the environment to other
    hosts by itself; hydra does). run_as_root: Open MPI refuses root without --allow-run-as-root.
    binding: mpiexec options that bind the ranks to CPUs (binding.binding_arguments), after the process count.
    launcher_exec: the program that starts processes on other hosts in ssh's place (called as ssh would be).
    launcher: SLURM (srun starts the processes on the allocation's hosts), FORK (this host alone, inside a Slurm
    job step) or None (ssh, or launcher_exec).
    ssh_args: options for ssh or that program (-p PORT, -i FILE); hydra takes them from mpiexec's environment
    (mpiexec_variables), Open MPI here.
    tcp_only: Open MPI's TCP transport between hosts (hydra's ranks are told by variables: horovodrun_flags).
    interfaces: the network interfaces the job's traffic (its launch included) may use; none: MPI's choice.
    mpi_args: further mpiexec options, placed last before the program.
    """
    env = dict(env or {}, **interface_variables(interfaces))
    if hosts and hostfile:
        raise ValueError("give either -H or --hostfile, not both")
    if flavour == HYDRA:
        argv = [mpiexec, "-n", str(num_proc), *binding]
        if launcher_exec:
            argv += ["-launcher", "ssh", "-launcher-exec", launcher_exec]
        elif launcher == SLURM:
            argv += ["-launcher", "slurm"]
        elif launcher == FORK:
            # Without -rmk user hydra would still spread the ranks over the allocation's hosts, started here.
            argv += ["-launcher", "fork", "-rmk", "user"]
        if interfaces:
            argv += ["-iface", interfaces[0]]  # where the proxies connect back to mpiexec
        if hosts:
            argv += ["-hosts", host_list_text(hosts)]
        elif hostfile:
            argv += ["-f", hostfile.path] if _hostfile_matches(flavour, hostfile) \
                else ["-hosts", host_list_text(hostfile.hosts)]
        for name, value in env.items():
            argv += ["-genv", name, str(value)]
    elif flavour == OPENMPI:
        argv = [mpiexec, "-np", str(num_proc), *_open_mpi_mapping(binding)]
        if run_as_root:
            argv.append("--allow-run-as-root")
        if launcher_exec:
            argv += ["--mca", "plm_rsh_agent", launcher_exec]
        elif launcher == SLURM:
            argv += ["--prtemca", "plm", "slurm"]
        elif launcher == FORK:
            # This host's slots only, not the allocation's (whose srun would wait for the step's CPUs).
            argv += ["--prtemca", "ras", "^slurm", "--prtemca", "plm", "^slurm"]
        if ssh_args:
            argv += ["--prtemca", "plm_ssh_args", " ".join(ssh_args)]
        if tcp_only:
            argv += list(OPENMPI_TCP_OPTIONS)
        if interfaces:
            # The ranks' TCP traffic, and the runtime's own (its daemons' connections to mpiexec).
            argv += ["--mca", "btl_tcp_if_include", ",".join(interfaces),
                     "--prtemca", "prte_if_include", ",".join(interfaces)]
        if hosts:
            argv += ["-H", host_list_text(hosts)]
        elif hostfile:
            argv += ["--hostfile", hostfile.path] if _hostfile_matches(flavour, hostfile) \
                else ["-H", host_list_text(hostfile.hosts)]
        for name, value in env.items():
            argv += ["-x", f"{name}={value}"]
        for name in forward_env:
            if name not in env:
                argv += ["-x", name]
    else:
        raise ValueError(f"unknown MPI flavour {flavour!r}")
    return argv + list(mpi_args) + list(program)
