"""torch.distributed's default rendezvous ("env://"), made to work in an MPI job that does not set its variables.

init_process_group without an init_method reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. hvdliterun sets
them all; a plain mpiexec sets none. Where RANK or WORLD_SIZE is missing, the job's MPI ranks take their place:
rank 0 starts torch's TCPStore (on MASTER_PORT where set, else a free port) and tells the others where to reach it
through hvdlite's broadcast (every rank is in init_process_group: it is collective): MASTER_ADDR where set, else
loopback when every rank is on its host, else its host name and IPv4 addresses, the first that answers. Where both are set, torch's own handler runs unchanged.
"""
import importlib
import os
import socket

from torch.distributed import TCPStore
from torch.distributed.constants import default_pg_timeout

from hvdlite.runner.reachability import first_answering
from hvdlite.runner.report_port import ipv4_addresses

# The module (torch.distributed's own attribute of that name is its function).
torch_rendezvous = importlib.import_module("torch.distributed.rendezvous")

_torch_env_handler = None


def install():
    global _torch_env_handler
    handlers = torch_rendezvous._rendezvous_handlers
    if handlers.get("env") is _mpi_or_env_handler:
        return
    _torch_env_handler = handlers["env"]
    # torch has no public way to replace a scheme's handler (register_rendezvous_handler refuses a taken one).
    handlers["env"] = _mpi_or_env_handler


def _mpi_or_env_handler(url, **kwargs):
    if (os.environ.get("RANK") and os.environ.get("WORLD_SIZE")) or "?" in url:
        return _torch_env_handler(url, **kwargs)
    return _mpi_rendezvous(kwargs.get("timeout", default_pg_timeout))


def _mpi_rendezvous(timeout):
    from hvdlite import basics

    from ..functions import broadcast_object

    if not basics.is_initialized():
        basics.init()
    rank, size = basics.rank(), basics.size()
    store = None
    candidates = None
    if rank == 0:
        port = int(os.environ.get("MASTER_PORT") or 0)
        store = TCPStore("127.0.0.1", port, size, True, timeout=timeout, wait_for_workers=False)  # listens on all
        candidates = [(host, store.port) for host in _master_hosts(single_host=basics.local_size() == size)]
    candidates = broadcast_object(candidates, root_rank=0, name="hvdlite.torch.distributed.rendezvous")
    if store is None:
        host, port = _first_reachable(candidates)
        store = TCPStore(host, port, size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("Unable to perform re-rendezvous using hvdlite's MPI rendezvous")


def _master_hosts(single_host):
    """Where the other ranks may reach rank 0's store: MASTER_ADDR where set; loopback when every rank is on this
    host; else this host's name and each of its IPv4 addresses (the others try them in order)."""
    if os.environ.get("MASTER_ADDR"):
        return [os.environ["MASTER_ADDR"]]
    if single_host:
        return ["127.0.0.1"]
    return [socket.getfqdn(), *ipv4_addresses()]


def _first_reachable(candidates):
    found = first_answering(candidates)
    if found is None:
        raise RuntimeError(f"hvdlite: rank 0's store for torch.distributed answers on none of {candidates}; set "
                           "MASTER_ADDR to an address of rank 0's host that the other hosts reach")
    return found
