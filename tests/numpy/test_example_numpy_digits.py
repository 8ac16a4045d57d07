"""examples/numpy_digits.py trains to a useful accuracy on 2 ranks launched by hvdliterun."""
import os
import re
import subprocess
import sys

from harness.processes import ROOT


def test_numpy_digits_learns_on_two_ranks():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONUNBUFFERED", None)  # whole lines per write, so the two ranks' output does not interleave
    result = subprocess.run([sys.executable, "-m", "hvdlite.runner", "-np", "2", sys.executable,
                             os.path.join(ROOT, "examples", "numpy_digits.py"), "--epochs", "5"],
                            env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    accuracies = [float(a) for a in re.findall(r"test accuracy (\d\.\d+)", result.stdout)]
    assert len(accuracies) == 5, result.stdout  # printed by rank 0 only
    assert accuracies[-1] > 0.85, result.stdout
