"""The PyTorch example trains for real: at 2 ranks it reaches the 1-rank test accuracy (within 1 point)."""
import os
import re
import subprocess
import sys

import pytest

from harness.processes import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "torch_digits.py")
HVDLITERUN = [sys.executable, "-m", "hvdlite.runner"]


def train(nranks):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60")
    result = subprocess.run(HVDLITERUN + ["-np", str(nranks), sys.executable, EXAMPLE], env=env,
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    epochs = re.findall(r"^epoch +(\d+) +train loss ([\d.]+) +test loss ([\d.]+) +test accuracy ([\d.]+)%",
                        result.stdout, re.M)
    assert [int(e[0]) for e in epochs] == list(range(1, 21)), output[-6000:]  # printed once, by rank 0
    final = re.search(r"ranks (\d+) .* final test accuracy ([\d.]+)%", result.stdout)
    assert final and int(final.group(1)) == nranks, output[-6000:]
    losses = [float(e[1]) for e in epochs]
    assert losses[-1] < losses[0] / 10, losses  # it learns
    return float(final.group(2))


@pytest.mark.long  # a whole training program (make check); make test has the quick training tests of the same parts
def test_two_ranks_reach_the_single_rank_accuracy():
    one, two = train(1), train(2)
    assert one > 95.0 and two > 95.0, (one, two)
    assert abs(one - two) <= 1.0, (one, two)
