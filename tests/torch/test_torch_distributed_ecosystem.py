"""What PyTorch users train with, on the "hvdlite" backend under hvdliterun: Lightning's Trainer with
DDPStrategy(process_group_backend="hvdlite") and Hugging Face Accelerate, each training an MLP on the digits on
2 ranks to the accuracy of its single-process run (within 1.5 points: the ranks see the data in another order);
and both under torchrun."""
import os
import re
import sys

import pytest

from harness.processes import run, with_hvdlite_importable

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
HVDLITERUN = [sys.executable, "-m", "hvdlite.runner"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--master-port", "0", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "127.0.0.1:0"]


def train(program, nranks, launcher=HVDLITERUN):
    """Trains ``nranks`` ranks started by ``launcher`` (HVDLITERUN or TORCHRUN)."""
    env = with_hvdlite_importable(dict(os.environ, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS="60"))
    path = os.path.join(PROGRAMS, program)
    command = (launcher + ["-np", str(nranks), sys.executable, path] if launcher is HVDLITERUN
               else launcher + ["--nproc-per-node", str(nranks), path])
    code, output = run(command, 300, env=env)
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


@pytest.mark.long
@pytest.mark.parametrize("program", ["lightning_digits.py", "accelerate_digits.py"])
def test_under_torchrun_trains_on_two_ranks_to_the_single_process_accuracy(program):
    """Started by torchrun (Lightning and Accelerate find torchrun's ranks), the two processes become one MPI job
    inside init_process_group("hvdlite")."""
    _, _, one = train(program, 1)
    backend, world, two = train(program, 2, launcher=TORCHRUN)
    assert (backend, world) == ("hvdlite", 2)
    assert one > 0.85, one
    assert two >= one - 0.015, (one, two)
