"""torch.distributed's default rendezvous ("env://"), made to work in an MPI job that sets none of its variables.

init_process_group without an init_method reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. hvdliterun sets
them; a plain mpiexec does not. There, instead of torch's "MASTER_ADDR expected" error, the job's rank 0 starts
torch's TCPStore on a free port and the others learn its address from hvdlite's broadcast (every rank is in
init_process_group: it is collective). Where any of those variables is set, torch's own handler runs unchanged.
"""
import importlib
import os
import socket

from torch.distributed import TCPStore

# The module (torch.distributed's own attribute of that name is its function).
torch_rendezvous = importlib.import_module("torch.distributed.rendezvous")

TORCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
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
    if any(os.environ.get(name) for name in TORCH_VARIABLES) or "?" in url:
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
        # Every rank on this host: loopback; else this host's name, which the others resolve (set MASTER_ADDR
        # where it does not resolve).
        host = "127.0.0.1" if basics.local_size() == size else socket.getfqdn()
        store = TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
        address = (host, store.port)
    address = broadcast_object(address, root_rank=0, name="hvdlite.torch.distributed.rendezvous")
    if store is None:
        store = TCPStore(address[0], address[1], size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("Unable to perform re-rendezvous using hvdlite's MPI rendezvous")
