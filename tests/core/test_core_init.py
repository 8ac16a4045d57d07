"""init() with a sub-communicator, process sets given at init, and sets built from communicators; generated
names counted per process set."""
import numpy as np
import pytest
from mpi4py import MPI

import hvdlite as hvd

pytestmark = [pytest.mark.openmpi, pytest.mark.sanitize(address=True, thread=True)]


@pytest.mark.ranks(4)
def test_init_with_communicators_and_process_sets():
    # Two independent hvdlite jobs (even and odd world ranks), then the whole job again with process sets.
    world = MPI.COMM_WORLD
    world_rank, world_size = world.Get_rank(), world.Get_size()

    # Two independent hvdlite jobs: even and odd world ranks.
    half = world.Split(world_rank % 2, world_rank)
    assert "__getattr__" in vars(hvd)  # names load on first use until init
    hvd.init(comm=half)
    # init binds every exported name and drops the module's __getattr__, under which CPython never specialises hvd.X.
    assert "__getattr__" not in vars(hvd) and all(name in vars(hvd) for name in hvd.__all__)
    assert hvd.size() == half.Get_size() and hvd.rank() == half.Get_rank(), (hvd.size(), hvd.rank())
    got = hvd.allreduce(np.array([float(world_rank)]), op=hvd.Sum, name="half")
    expected = sum(r for r in range(world_size) if r % 2 == world_rank % 2)
    assert got[0] == expected, (got, expected)
    hvd.shutdown()

    # The whole job again, with a process set registered at init and another built from a communicator.
    evens = hvd.ProcessSet([r for r in range(world_size) if r % 2 == 0])
    hvd.init(process_sets=[evens])
    assert hvd.size() == world_size
    assert evens.process_set_id is not None and evens.included() == (world_rank % 2 == 0)
    if evens.included():
        got = hvd.allreduce(np.ones(3), op=hvd.Sum, name="evens", process_set=evens)
        assert np.all(got == evens.size()), got
    first_two = world.Split(0 if world_rank < 2 else MPI.UNDEFINED, world_rank)  # collective over the world
    from_comm = hvd.add_process_set(hvd.ProcessSet(first_two if world_rank < 2 else [0, 1]))
    assert from_comm.ranks == [0, 1], from_comm.ranks
    hvd.barrier()
    hvd.shutdown()


@pytest.mark.ranks(2)
@pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=10)
def test_unnamed_collectives_on_a_process_set_leave_global_names_aligned():
    # Generated names are counted per process set: ranks outside a set must not fall out of step.
    hvd.init()
    ps = hvd.add_process_set([1])
    if hvd.rank() == 1:
        hvd.allreduce(np.ones(1), process_set=ps)
        hvd.broadcast_object(1, root_rank=1, process_set=ps)  # a global rank
    assert hvd.allreduce(np.ones(1), op=hvd.Sum)[0] == 2
    assert hvd.broadcast_object("from0" if hvd.rank() == 0 else None) == "from0"
    hvd.shutdown()
