"""The TensorFlow examples under hvdliterun: 2 ranks reach the validation accuracy of 1 rank (within 1 point)."""
import json
import os
import sys

import pytest

from harness.processes import ROOT, run, venv_tool

# Fewer epochs than the examples' defaults keep the suite short; both sizes still converge (~97%).
SETTINGS = ["--epochs", "15", "--batch-size", "32"]


def run_example(script, nranks, tmp_path):
    result_file = tmp_path / f"{os.path.basename(script)}.{nranks}.json"
    command = [venv_tool("hvdliterun"), "-np", str(nranks), sys.executable, os.path.join(ROOT, "examples", script),
               *SETTINGS, "--json", str(result_file)]
    returncode, output = run(command, timeout=200)
    assert returncode == 0, output[-6000:]
    assert f"ranks={nranks} val_accuracy=" in output, output[-3000:]
    with open(result_file) as stream:
        result = json.load(stream)
    assert result["size"] == nranks
    return result["val_accuracy"]


@pytest.mark.timeout(420)
# Whole training programs (make check): make test has quick training tests of the same parts (test_tf_training.py).
@pytest.mark.long
@pytest.mark.parametrize("script", ["keras_digits.py", "tf_digits_tape.py"])
def test_two_ranks_reach_the_accuracy_of_one(script, tmp_path):
    one = run_example(script, 1, tmp_path)
    two = run_example(script, 2, tmp_path)
    assert one > 0.93 and two > 0.93, (one, two)
    assert abs(one - two) <= 0.01, f"-np 1: {one:.4f}, -np 2: {two:.4f}"
