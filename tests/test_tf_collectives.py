"""hvdlite.tensorflow collectives on 2 and 3 real MPI ranks: every collective x dtype, eagerly and inside
tf.function, with gradients, IndexedSlices, process sets, broadcast_variables/objects, join/barrier, and
mismatched inputs raising on every rank (tests/tf_workers/collectives.py checks against float64 NumPy)."""
import pytest

from tf_workers.launch import assert_all_ranks_ok, run_worker


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nranks", [2, 3])
def test_every_collective_and_dtype_eager_and_in_tf_function(nranks):
    returncode, output = run_worker(nranks, "collectives.py", timeout=280)
    assert_all_ranks_ok(returncode, output, nranks, more_checks_than=400)
