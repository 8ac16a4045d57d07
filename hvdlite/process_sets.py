"""Process sets: groups of ranks that run collectives among themselves.

Every rank of the job adds and removes process sets with the same arguments in the same order;
the core agrees on them through its own negotiation, so the ids match everywhere.
"""
from ._native import error_buffer, error_text, ffi, lib
from . import _tensor_calls  # noqa: E402  after _native, which loads the core it links against
from .errors import HvdliteError


class ProcessSet:
    """A set of global ranks. Pass it as ``process_set=`` to any collective."""

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator
            from mpi4py import MPI
            group = ranks_or_comm.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), MPI.COMM_WORLD.Get_group())
        else:
            ranks = ranks_or_comm
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("this process set has not been added: call hvd.add_process_set() first")
        return self.process_set_id

    def size(self):
        return len(self.ranks)

    def rank(self):
        """This process's rank inside the set, or -1 if it is not a member."""
        return lib.hvdlite_process_set_rank(self._id())

    def included(self):
        return self.rank() >= 0

    def root_in_set(self, root_rank):
        """The rank within the set of a broadcast's root, which callers name by its global rank (as Horovod
        does). A root outside the set is a ValueError; any root of the global set goes on to the core, which
        checks its range on every rank."""
        root_rank = int(root_rank)
        if self.process_set_id == 0:
            return root_rank
        try:
            return self.ranks.index(root_rank)
        except ValueError:
            raise ValueError(f"root_rank {root_rank} is not a member of {self!r} (broadcast roots are global "
                             f"ranks)") from None

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_added = {0: global_process_set}  # process set id -> ProcessSet, for the APIs that take ids (Horovod's *_op)


def process_set_by_id(process_set_id):
    """The ProcessSet added with this id (0: the global one); ValueError for an id not (or no longer) added."""
    try:
        return _added[int(process_set_id)]
    except KeyError:
        raise ValueError(f"no process set with id {process_set_id} has been added") from None


def _refresh_global(size):
    global_process_set.ranks = list(range(size))


def _wait_for_change(handle_id, what):
    """The result of a process-set change's handle. Handles are the extension's (Handle adopts the id), as every
    handle Python waits for: each function of the header is reached through one binding."""
    if handle_id < 0:
        raise AssertionError("unreachable")
    handle = _tensor_calls.Handle(handle_id, (), what)
    try:
        handle.wait()
        return handle.result()
    except HvdliteError as error:
        raise ValueError(f"{what} failed: {error}") from None
    finally:
        handle.release()


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) on every rank; returns the ProcessSet."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} has already been added")
    process_set.process_set_id = _added_set_id(lib.hvdlite_add_process_set, process_set.ranks, "add_process_set")
    _added[process_set.process_set_id] = process_set
    return process_set


def add_process_set_of_members(ranks):
    """The process set of these ranks, asked for by its members alone (the others need not call: a framework's
    group made on its members only, as torch.distributed's new_group does); the set already added with these
    ranks where there is one. Returns the ProcessSet."""
    ranks = sorted(int(r) for r in ranks)
    process_set_id = _added_set_id(lib.hvdlite_add_process_set_of_members, ranks, "add_process_set_of_members")
    if process_set_id not in _added:
        process_set = ProcessSet(ranks)
        process_set.process_set_id = process_set_id
        _added[process_set_id] = process_set
    return _added[process_set_id]


def _added_set_id(add, ranks, what):
    """The id of the set of these ranks that the core's add function (of all ranks, or of members) makes."""
    buffer = error_buffer()
    handle = add(ffi.new("int32_t[]", ranks), len(ranks), buffer, len(buffer))
    if handle < 0:
        _raise_enqueue_error(handle, buffer)
    return int(_wait_for_change(handle, f"{what}({ranks})"))


def remove_process_set(process_set):
    """Removes a process set on every rank; returns True if it existed."""
    if process_set.process_set_id in (None, 0):
        return False
    buffer = error_buffer()
    handle = lib.hvdlite_remove_process_set(process_set.process_set_id, buffer, len(buffer))
    if handle < 0:
        _raise_enqueue_error(handle, buffer)
    try:
        _wait_for_change(handle, f"remove_process_set({process_set.process_set_id})")
    except ValueError:
        return False
    _added.pop(process_set.process_set_id, None)
    process_set.process_set_id = None
    return True


def _raise_enqueue_error(code, buffer):
    message = error_text(buffer)
    if code == -3:
        raise HvdliteError(message)
    raise ValueError(message)
