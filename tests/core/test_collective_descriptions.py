"""The one description of each collective (hvdlite_collective_info in the header, read through
hvdlite.requests.describe): it covers every collective of the header's enum, its output rule sizes reducescatter's
blocks as an independent split of the rows does, and the core itself refuses what the description refuses, so an
adapter that skipped the check still gets a clear error on every rank, never a hang."""
import numpy as np
import pytest

import hvdlite as hvd
from hvdlite import native_header
from hvdlite._native import ffi, lib
from hvdlite.errors import InvalidRequestError
from hvdlite.requests import (COLLECTIVES, Collective, Output, Request, describe, output_first_dim, output_shape,
                              submit_and_wait)
from harness.checks import assert_raises

pytestmark = [pytest.mark.ranks(2, 3), pytest.mark.across_hosts]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


def test_every_collective_of_the_header_is_described_once_by_its_constants_name():
    constants = native_header.enums()["hvdlite_collective"]
    assert sorted(COLLECTIVES) == sorted(constants.values())
    for constant, value in constants.items():
        info = describe(value)
        assert info.name == constant.removeprefix("HVDLITE_").lower(), (constant, info)
        assert describe(info.name) is info
        assert info.output in (Output.LIKE_INPUT, Output.RANK_BLOCK, Output.GATHERED, Output.NONE)
    assert lib.hvdlite_collective_describe(max(constants.values()) + 1) == ffi.NULL
    assert lib.hvdlite_collective_describe(-1) == ffi.NULL


def test_reducescatter_blocks_are_the_rows_of_an_independent_split():
    for rows in range(0, 12):
        for size in range(1, 6):
            blocks = [len(part) for part in np.array_split(np.arange(rows), size)]  # the first rows % size get one more
            got = [output_first_dim(Collective.REDUCESCATTER, rows, size, rank) for rank in range(size)]
            assert got == blocks, (rows, size, got, blocks)
            assert output_first_dim(Collective.ALLREDUCE, rows, size, 0) == rows
            assert output_first_dim(Collective.ALLGATHER, rows, size, 0) == -1  # the other ranks decide it
    assert output_first_dim(Collective.REDUCESCATTER, 4, 2, 2) == -1  # no such rank
    assert output_shape(Collective.REDUCESCATTER, "t", (7, 3), hvd.global_process_set) == (
        len(np.array_split(np.arange(7), hvd.size())[hvd.rank()]), 3)
    assert output_shape(Collective.ALLTOALL, "t", (4,), hvd.global_process_set) is None


@pytest.mark.parametrize("collective", [Collective.ALLGATHER, Collective.ALLTOALL, Collective.REDUCESCATTER])
def test_the_core_refuses_a_scalar_an_adapter_let_through_on_every_rank(collective):
    name = f"describe.scalar.{describe(collective).name}"
    x = np.ones((), np.float32)
    output = np.empty((), np.float32)
    # Built by hand, past request_for's check: the core's own check of the description answers.
    request = Request(collective, name, "float32", (), x, output if collective == Collective.REDUCESCATTER else 0,
                      keepalive=(x, output))
    assert_raises(InvalidRequestError, submit_and_wait, request, match=[name, describe(collective).name, "dimension"])
    got = hvd.allgather(np.full(1, hvd.rank(), np.float64), name=name)  # the name is free again, nothing waits
    assert got.tolist() == list(range(hvd.size()))
