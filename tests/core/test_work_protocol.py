"""One Work protocol for every pending operation (hvdlite/work.py): the core's Handle, a prepared group's
GroupHandle and a CompositeWork built of core handles each answer wait, poll, result, exception, release and finish
alike, on real ranks: done well, failed (the ranks disagree on a shape: the error names the tensor on every rank,
raised by wait and carried by exception), and not done yet."""
import time

import numpy as np
import pytest

import hvdlite as hvd
from hvdlite.errors import HvdliteError
from hvdlite.requests import Collective, PreparedGroup, Request, address, submit
from hvdlite.work import CompositeWork
from harness.checks import assert_close

pytestmark = [pytest.mark.ranks(2), pytest.mark.hvd_env(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=20),
              pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()


def summed(name, length, value):
    """A Sum all-reduce of ``length`` copies of ``value`` into its own output: (request, output)."""
    data = np.full(length, value, np.float64)
    out = np.empty_like(data)
    return Request(Collective.ALLREDUCE, name, "float64", data.shape, address(data), address(out), op=hvd.Sum,
                   keepalive=(data, out)), out


def one_core_handle(name, length, value):
    request, out = summed(name, length, value)
    return submit(request), out


def a_group(name, length, value):
    requests, outs = zip(*[summed(f"{name}.{i}", length, value) for i in range(2)])
    return PreparedGroup(list(requests)).submit(), outs


def a_composite(name, length, value):
    requests, outs = zip(*[summed(f"{name}.{i}", length, value) for i in range(2)])
    return CompositeWork([submit(r) for r in requests], lambda handles: sum(o.sum() for o in outs)), outs


KINDS = {"core handle": one_core_handle, "group": a_group, "composite": a_composite}


@pytest.mark.parametrize("kind", KINDS)
def test_a_work_done_well(kind):
    work, out = KINDS[kind](f"work.{kind}.well", 8, hvd.rank() + 1.0)
    work.wait()
    expected = sum(r + 1.0 for r in range(hvd.size()))
    for array in (out if isinstance(out, tuple) else (out,)):
        assert_close(f"{kind} output", array, np.full(8, expected))
    assert work.poll() is True
    assert work.exception() is None
    if kind == "composite":
        assert work.result() == pytest.approx(2 * 8 * expected)
    elif kind == "group":
        assert work.result() is None
    work.release()
    work.release()  # again: nothing


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_work_raises_on_wait_and_carries_its_error(kind):
    # The ranks disagree on the length: an error on every rank, naming the tensor.
    work, _ = KINDS[kind](f"work.{kind}.bad", 4 + hvd.rank(), 1.0)
    with pytest.raises(HvdliteError, match=f"work.{kind}.bad"):
        work.wait()
    assert work.poll() is True
    error = work.exception()
    assert isinstance(error, HvdliteError) and f"work.{kind}.bad" in str(error), error
    work.release()


@pytest.mark.parametrize("kind", KINDS)
def test_finish_waits_then_releases_whatever_happened(kind):
    work, out = KINDS[kind](f"work.{kind}.finish", 3, 2.0)
    work.finish()
    for array in (out if isinstance(out, tuple) else (out,)):
        assert_close(f"{kind} output", array, np.full(3, 2.0 * hvd.size()))
    bad, _ = KINDS[kind](f"work.{kind}.finish.bad", 2 + hvd.rank(), 1.0)
    with pytest.raises(HvdliteError):
        bad.finish()
    if kind == "core handle":
        with pytest.raises(HvdliteError, match="already released"):
            bad.wait()


@pytest.mark.parametrize("kind", KINDS)
def test_a_work_not_done_yet_has_no_exception(kind):
    # Rank 1 submits a second later: rank 0's work cannot be done before that.
    if hvd.rank() == 1:
        time.sleep(1.0)
    work, _ = KINDS[kind](f"work.{kind}.late", 5, 1.0)
    if hvd.rank() == 0:
        assert work.poll() is False
        assert work.exception() is None
    work.finish()
