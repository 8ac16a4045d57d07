"""The engines' examples reach the accuracy of their script on one process (within 1 point):
examples/spark_keras_digits.py (Keras model.fit with DistributedOptimizer, 2 ranks in the tasks of a real PySpark
local[2]) and examples/ray_torch_digits.py (PyTorch with DistributedOptimizer, 2 ranks in the actors of a real
local Ray)."""
import json
import os
import sys

import pytest

from harness.processes import ROOT, run

# Minutes of training, beside the engines' quicker tests (tests/engines/test_spark.py, test_ray.py) in make test.
pytestmark = pytest.mark.check_long
SETTINGS = ["--epochs", "15", "--batch-size", "32"]  # as tests/tensorflow/test_tf_examples.py


def accuracy_of(command, result_file):
    code, output = run(command, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert code == 0, output[-6000:]
    with open(result_file) as stream:
        return json.load(stream)


@pytest.mark.timeout(600)
def test_keras_on_spark_reaches_the_accuracy_of_one_process(tmp_path):
    examples = os.path.join(ROOT, "examples")
    one = accuracy_of([sys.executable, os.path.join(examples, "keras_digits.py"), *SETTINGS, "--json",
                       str(tmp_path / "one.json")], tmp_path / "one.json")
    spark = accuracy_of([sys.executable, os.path.join(examples, "spark_keras_digits.py"), "--num-proc", "2",
                         *SETTINGS, "--json", str(tmp_path / "spark.json")], tmp_path / "spark.json")
    assert (one["size"], spark["size"]) == (1, 2)
    assert one["val_accuracy"] > 0.93 and spark["val_accuracy"] > 0.93, (one, spark)
    assert abs(one["val_accuracy"] - spark["val_accuracy"]) <= 0.01, (one, spark)


@pytest.mark.timeout(600)
def test_torch_on_ray_reaches_the_accuracy_of_one_process(tmp_path):
    examples = os.path.join(ROOT, "examples")
    code, output = run([sys.executable, os.path.join(examples, "torch_digits.py")], timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert code == 0, output[-6000:]
    one = float(output.rsplit("final test accuracy ", 1)[1].split("%")[0]) / 100
    ray_run = accuracy_of([sys.executable, os.path.join(examples, "ray_torch_digits.py"), "--num-workers", "2",
                           "--json", str(tmp_path / "ray.json")], tmp_path / "ray.json")
    assert ray_run["size"] == 2
    assert one > 0.95 and ray_run["test_accuracy"] > 0.95, (one, ray_run)
    assert abs(one - ray_run["test_accuracy"]) <= 0.01, (one, ray_run)
