"""What PyTorch users train with, on the "hvdlite" backend under hvdliterun: Lightning's Trainer with
DDPStrategy(process_group_backend="hvdlite") and Hugging Face Accelerate, each training an MLP on the digits on
2 ranks to the accuracy of its single-process run (within 1.5 points: the ranks see the data in another order)."""
import os
import re
import sys

import pytest

from harness.processes import run, with_hvdlite_importable

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
HVDLITERUN = [sys.executable, "-m", "hvdlite.runner"]


def train(program, nranks):
    env = with_hvdlite_importable(dict(os.environ, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60"))
    code, output = run(HVDLITERUN + ["-np", str(nranks), sys.executable, os.path.join(PROGRAMS, program)], 300,
                       env=env)
    assert code == 0, output[-6000:]
    found = re.search(r"^backend (\S+) world (\d+) accuracy ([\d.]+)", output, re.M)
    assert found, output[-6000:]
    return found.group(1), int(found.group(2)), float(found.group(3))


@pytest.mark.long
@pytest.mark.parametrize("program", ["lightning_digits.py", "accelerate_digits.py"])
def test_trains_on_two_ranks_to_the_single_process_accuracy(program):
    _, one_world, one = train(program, 1)
    backend, world, two = train(program, 2)
    assert (backend, world, one_world) == ("hvdlite", 2, 1)
    assert one > 0.85, one  # it learns
    assert two >= one - 0.015, (one, two)
