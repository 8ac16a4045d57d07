"""Training with hvdlite.tensorflow on 2 and 3 real MPI ranks (tests/tf_workers/training.py):
DistributedGradientTape eagerly and in tf.function, Keras 3 DistributedOptimizer (SGD, Adam, AdamW) under
model.fit, backward_passes_per_step, the callbacks, load_model and embedding (IndexedSlices) gradients. Weights
must end identical on every rank and equal to a single-process reference trained on the global batch."""
import pytest

from tf_workers.launch import assert_all_ranks_ok, run_worker


@pytest.mark.timeout(300)
@pytest.mark.parametrize("nranks", [2, 3])
def test_training_matches_single_process_reference_and_is_identical_on_all_ranks(nranks):
    returncode, output = run_worker(nranks, "training.py", timeout=280)
    assert_all_ranks_ok(returncode, output, nranks, more_checks_than=90)
