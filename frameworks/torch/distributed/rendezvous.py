"""torch.distributed's default rendezvous ("env://"), made to work in an MPI job that does not set its variables.

init_process_group without an init_method reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. hvdliterun sets
them all; a plain mpiexec sets none. Where RANK or WORLD_SIZE is missing, the job's MPI ranks take their place:
rank 0 starts torch's TCPStore (on MASTER_ADDR and MASTER_PORT where they are set, else on loopback when every
rank is on its host, its host name otherwise, and a free port) and the others learn where from hvdlite's broadcast
(every rank is in init_process_group: it is collective). Where both are set, torch's own handler runs unchanged.
"""
import importlib
import os
import socket

from torch.distributed import TCPStore

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


def _mpi_or_env_handler(url, timeout=None, **kwargs):
    if (os.environ.get("RANK") and os.environ.get("WORLD_SIZE")) or "?" in url:
        return _torch_env_handler(url, timeout=timeout, **kwargs) if timeout is not None else \
            _torch_env_handler(url, **kwargs)
    return _mpi_rendezvous(timeout)


def _mpi_rendezvous(timeout):
    from hvdlite import basics

    from ..functions import broadcast_object

    if not basics.is_initialized():
        basics.init()
    rank, size = basics.rank(), basics.size()
    store = None
    address = None
    if rank == 0:
        host = os.environ.get("MASTER_ADDR") or ("127.0.0.1" if basics.local_size() == size else socket.getfqdn())
        port = int(os.environ.get("MASTER_PORT") or 0)
        store = TCPStore(host, port, size, True, timeout=timeout, wait_for_workers=False)
        address = (host, store.port)
    address = broadcast_object(address, root_rank=0, name="hvdlite.torch.distributed.rendezvous")
    if store is None:
        store = TCPStore(address[0], address[1], size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("Unable to perform re-rendezvous using hvdlite's MPI rendezvous")
