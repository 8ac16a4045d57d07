"""The hosts and slots of the Slurm allocation a launcher runs in, from the variables Slurm gives every job step:
SLURM_JOB_NODELIST in Slurm's compressed host list syntax (`node[01-03,07],gpu-a1`) and SLURM_TASKS_PER_NODE
(`2(x3),1`: the tasks on each of those hosts, in order)."""
import re

from .hosts import Host

_BRACKETS = re.compile(r"\[([^\]]*)\]")


def _ranges(body, text):
    """'01-03,07' -> ['01', '02', '03', '07'] (zero padding kept, as Slurm keeps it)."""
    names = []
    for part in body.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"Slurm host list {text!r}: bad range {part!r}")
        if not dash:
            names.append(low)
            continue
        if int(high) < int(low):
            raise ValueError(f"Slurm host list {text!r}: range {part!r} runs backwards")
        names += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return names


def _split_top_level(text):
    """Splits at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"Slurm host list {text!r}: unbalanced brackets")
    if depth:
        raise ValueError(f"Slurm host list {text!r}: unbalanced brackets")
    return items + [text[start:]]


def expand_host_list(text):
    """'node[01-02],gpu[1,3],login' -> ['node01', 'node02', 'gpu1', 'gpu3', 'login'] (several bracket groups in one
    name expand to every combination, the first group slowest, as `scontrol show hostnames` lists them)."""
    hosts = []
    for item in _split_top_level(text.strip()):
        item = item.strip()
        if not item:
            continue
        names = [""]
        position = 0
        for match in _BRACKETS.finditer(item):
            prefix = item[position:match.start()]
            names = [n + prefix + r for n in names for r in _ranges(match.group(1), text)]
            position = match.end()
        hosts += [n + item[position:] for n in names]
    if not hosts:
        raise ValueError(f"Slurm host list {text!r}: no hosts")
    return hosts


def expand_counts(text):
    """'2(x3),1' -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE's and SLURM_JOB_CPUS_PER_NODE's syntax)."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"Slurm count list {text!r}: bad item {part!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def in_job_step(environ):
    """Whether this process runs in a job step (srun started it, or a shell it started) rather than in the
    allocation's batch script or salloc's shell: a step holds the allocation's CPUs, so another srun would wait."""
    return bool(environ.get("SLURM_JOB_ID") and environ.get("SLURM_STEP_ID"))


def allocation_hosts(environ):
    """[Host(name, slots)] of the allocation this process runs in (slots: the tasks Slurm gives each host, else its
    CPUs), or None outside one."""
    if not environ.get("SLURM_JOB_ID"):
        return None
    nodes = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodes:
        return None
    names = expand_host_list(nodes)
    slots_text = environ.get("SLURM_TASKS_PER_NODE") or environ.get("SLURM_JOB_CPUS_PER_NODE")
    if not slots_text:
        return [Host(name) for name in names]
    slots = expand_counts(slots_text)
    if len(slots) != len(names):
        raise ValueError(f"Slurm gives {len(names)} hosts ({nodes}) but {len(slots)} task counts ({slots_text})")
    return [Host(name, count) for name, count in zip(names, slots)]
