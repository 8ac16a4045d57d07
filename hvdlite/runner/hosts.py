"""Hosts and their slots, from `-H a:2,b:2` or a hostfile (Horovod's `host slots=N` lines or hydra's `host:N`)."""
from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class Host:
    name: str
    slots: Optional[int] = None  # None: let the MPI library decide


@dataclass(frozen=True)
class Hostfile:
    path: str
    hosts: List[Host]
    style: str  # "colon" (host:N, hydra's), "slots" (host slots=N, Open MPI's and Horovod's) or "bare" (host)


def _slots(text, where):
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{where}: slots must be a positive integer, got {text!r}")
    return int(text)


def parse_host_list(text):
    """'a:2,b:2,c' -> [Host('a', 2), Host('b', 2), Host('c')]."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, slots = item.partition(":")
        if not name:
            raise ValueError(f"-H {text!r}: empty host name")
        hosts.append(Host(name, _slots(slots, f"-H {text!r}") if slots else None))
    if not hosts:
        raise ValueError(f"-H {text!r}: no hosts")
    return hosts


def read_hostfile(path):
    """Reads a hostfile; '#' starts a comment. All lines must use one style."""
    hosts, styles = [], set()
    with open(path) as stream:
        for number, line in enumerate(stream, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            where = f"{path}:{number}"
            if len(words) == 1 and ":" in words[0]:
                name, _, slots = words[0].partition(":")
                hosts.append(Host(name, _slots(slots, where)))
                styles.add("colon")
            elif len(words) == 1:
                hosts.append(Host(words[0]))
                styles.add("bare")
            elif len(words) == 2 and words[1].startswith("slots="):
                hosts.append(Host(words[0], _slots(words[1][len("slots="):], where)))
                styles.add("slots")
            else:
                raise ValueError(f"{where}: expected 'host slots=N', 'host:N' or 'host', got {line.strip()!r}")
    if not hosts:
        raise ValueError(f"{path}: no hosts")
    if len(styles) > 1:
        styles.discard("bare")  # a bare host fits either style
    if len(styles) > 1:
        raise ValueError(f"{path}: mixes 'host:N' and 'host slots=N' lines")
    return Hostfile(path, hosts, styles.pop())


def host_list_text(hosts):
    """[Host('a', 2), Host('b')] -> 'a:2,b' (the spelling both hydra's -hosts and Open MPI's -H accept)."""
    return ",".join(f"{h.name}:{h.slots}" if h.slots else h.name for h in hosts)


def rank_placement(hosts, num_proc, spread_extra=False):
    """{host name: [ranks]} as the MPI launcher places them: each host's slots filled in order (a host without a
    count has one slot). Ranks beyond the slots go around again, a slot's worth per host per turn, as hydra places
    them; with spread_extra, as Open MPI mapping by slot does: shared out evenly (the first hosts taking what does
    not divide), each host's ranks numbered together."""
    slots = [host.slots or 1 for host in hosts]
    if spread_extra and num_proc > sum(slots):
        extra, left = divmod(num_proc - sum(slots), len(hosts))
        counts = [count + extra + (index < left) for index, count in enumerate(slots)]
        placement, rank = {}, 0
        for host, count in zip(hosts, counts):
            placement[host.name] = list(range(rank, rank + count))
            rank += count
        return placement
    placement = {host.name: [] for host in hosts}
    rank = 0
    while rank < num_proc:
        for host, count in zip(hosts, slots):
            for _ in range(count):
                if rank == num_proc:
                    break
                placement[host.name].append(rank)
                rank += 1
    return placement
