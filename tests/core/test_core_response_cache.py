"""A step that reduces more tensors than the response cache holds, a few per negotiation round (as gradients
become ready): the cache evicts each tensor before its next use. Every rank still gets the right sums, and
rank 0 alone warns, once, naming the setting to raise; a cache that holds the step's tensors never warns."""
import numpy as np
import pytest

import hvdlite as hvd

TENSORS = 12
PER_ROUND = 4
pytestmark = [pytest.mark.ranks(3), pytest.mark.sanitize(address=True, thread=True)]


def contribution(rank, i, step):
    return np.linspace(-1.0, 1.0, 8) * (rank + 1) + i + 0.25 * step


@pytest.mark.parametrize("capacity, warns", [
    pytest.param(capacity, warns, marks=pytest.mark.hvd_env(HVDLITE_CACHE_CAPACITY=capacity), id=f"capacity {capacity}")
    for capacity, warns in ((8, True), (16, False))])
def test_a_cache_smaller_than_a_step_says_so_once(capfd, capacity, warns):
    hvd.init()
    size = hvd.size()
    for step in range(4):
        for start in range(0, TENSORS, PER_ROUND):  # each chunk waited for before the next: its own round
            chunk = range(start, min(TENSORS, start + PER_ROUND))
            handles = [hvd.allreduce_async(contribution(hvd.rank(), i, step).astype(np.float32), name=f"thrash.{i}",
                                           op=hvd.Sum) for i in chunk]
            for i, handle in zip(chunk, handles):
                expected = sum(contribution(r, i, step) for r in range(size))  # float64
                got = hvd.synchronize(handle)
                assert np.allclose(got, expected, rtol=1e-6, atol=1e-5), (i, step, got, expected)
    rank = hvd.rank()
    hvd.shutdown()  # the warning, if any, is written by now
    warnings = [line for line in capfd.readouterr().err.splitlines() if "response cache too small" in line]
    if not warns or rank != 0:
        assert warnings == [], warnings
        return
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("[hvdlite rank 0] WARNING") and "HVDLITE_CACHE_CAPACITY" in warnings[0], warnings
    assert f"its {capacity} entries" in warnings[0] and "'thrash." in warnings[0], warnings
