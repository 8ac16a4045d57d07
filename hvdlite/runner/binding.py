"""Which CPUs each rank may run on: hvdliterun's --bind-to, spelled for hydra (MPICH) or Open MPI.

Why bind at all: a rank is two threads (the training loop and hvdlite's background thread) that hand work to each
other. Unbound, the scheduler moves them onto other ranks' CPUs, and a hand-over becomes a wake-up of another CPU
(on a VM, of a halted vCPU), which made small all-reduces slower and their times bimodal
(docs/decisions/negotiation-rounds-on-the-background-thread.md).
"""
import os
from dataclasses import dataclass
from typing import List, Optional

from .mpiexec import HYDRA, OPENMPI

AUTO, CPUS, NONE = "auto", "cpus", "none"
CHOICES = (AUTO, CPUS, NONE)


@dataclass(frozen=True)
class Binding:
    """How to bind: per_rank CPUs each (0: not at all); cpu_sets, for a job on this host alone, the CPUs of
    each rank by rank (from this launcher's own affinity mask, which hydra's topology view ignores)."""
    mode: str
    per_rank: int = 0
    cpu_sets: Optional[List[List[int]]] = None


def allowed_cpus():
    """The CPUs this process may run on (its affinity mask, which containers and batch systems narrow), the
    hardware threads of a core next to each other, so that a rank's share is whole cores where it can be."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        cpus = range(os.cpu_count() or 1)
    return ordered_by_core(cpus, _read_topology)


def ordered_by_core(cpus, topology):
    """cpus sorted by (package, core, cpu); topology(cpu) gives (package, core), or None where unknown."""
    def key(cpu):
        place = topology(cpu)
        return (0, place[0], place[1], cpu) if place else (1, 0, 0, cpu)
    return sorted(cpus, key=key)


def _read_topology(cpu):
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    try:
        with open(base + "physical_package_id") as package, open(base + "core_id") as core:
            return int(package.read()), int(core.read())
    except (OSError, ValueError):
        return None


def ranks_per_host(num_proc, hosts):
    """How many ranks share the busiest host: all of them without a host list, else at most its largest slots."""
    if not hosts:
        return num_proc
    slots = [host.slots for host in hosts if host.slots]
    if len(slots) < len(hosts):  # a host without slots: the MPI library spreads ranks as it likes
        return max(1, -(-num_proc // len(hosts)))
    return min(num_proc, max(slots))


def plan(mode, num_proc, hosts, cpus):
    """The Binding for a job of num_proc ranks on hosts (None: this host alone), cpus being this host's allowed CPUs.

    cpus: each rank gets an equal share of the CPUs, at least one (more ranks than CPUs: ranks share, in turn).
    auto: the same, but only for a job on this host alone with a CPU for every rank; a job on other hosts (whose
    CPUs this launcher cannot see) or with more ranks than CPUs is left to the scheduler.
    """
    if mode == NONE or (mode == AUTO and (hosts or num_proc > len(cpus))):
        return Binding(mode)
    share = max(1, len(cpus) // ranks_per_host(num_proc, hosts))
    if hosts:
        return Binding(mode, share)
    chunks = [cpus[start:start + share] for start in range(0, len(cpus) - share + 1, share)]
    return Binding(mode, share, [chunks[rank % len(chunks)] for rank in range(num_proc)])


def binding_arguments(flavour, binding):
    """mpiexec options for binding ([] for none).

    Open MPI binds ranks by itself (to a core each, or a socket from 3 ranks up), so auto leaves it its own
    default, none turns it off, and cpus asks for per_rank hardware threads each.
    """
    if flavour == HYDRA:
        if binding.cpu_sets:
            return ["-bind-to", "user:" + ",".join("+".join(map(str, cpus)) for cpus in binding.cpu_sets)]
        return ["-bind-to", f"hwthread:{binding.per_rank}"] if binding.per_rank else []
    if flavour == OPENMPI:
        if binding.mode == NONE:
            return ["--bind-to", "none"]
        if binding.mode == CPUS:
            return ["--use-hwthread-cpus", "--map-by", f"slot:PE={binding.per_rank}", "--bind-to", "hwthread"]
        return []
    raise ValueError(f"unknown MPI flavour {flavour!r}")
