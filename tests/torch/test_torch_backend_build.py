"""The torch.distributed backend's C++ part is built once per PyTorch and loaded without a compiler afterwards: DDP
trains on a PATH with no C++ compiler once it was built ahead (`python -m hvdlite.torch.build`); with neither, the
first process group fails at once saying what to install and what to run; a build killed half-way blocks nothing;
programs that load it with different environments never build it again.

The tests' own environment is an editable install, which runs cmake and ninja on import to bring the core up to
date: the compiler-less PATH keeps those two (they compile nothing when nothing changed) and drops the compiler.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from harness.processes import QUIET_THREADS, run, venv_tool, with_hvdlite_importable
from hvdlite.torch.distributed import library_cache

VENV_BIN = os.path.dirname(sys.executable)
DDP_STEPS, SAMPLES_PER_RANK, FEATURES = 5, 8, 6
LR = 0.1


def data():
    rng = np.random.default_rng(7)
    return rng.standard_normal((2 * SAMPLES_PER_RANK, FEATURES)), rng.standard_normal((2 * SAMPLES_PER_RANK, 1))


DDP_PROGRAM = f"""
import json, sys
import numpy as np, torch, torch.distributed as dist
import hvdlite.torch  # registers the backend
torch.manual_seed(0)
dist.init_process_group("hvdlite")
rank = dist.get_rank()
rng = np.random.default_rng(7)
x, y = rng.standard_normal((2 * {SAMPLES_PER_RANK}, {FEATURES})), rng.standard_normal((2 * {SAMPLES_PER_RANK}, 1))
shard = slice(rank * {SAMPLES_PER_RANK}, (rank + 1) * {SAMPLES_PER_RANK})
model = torch.nn.Linear({FEATURES}, 1).double()
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr={LR})
for _ in range({DDP_STEPS}):
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(torch.from_numpy(x[shard])), torch.from_numpy(y[shard])).backward()
    opt.step()
if rank == 0:
    print("WEIGHTS " + json.dumps([p.detach().numpy().ravel().tolist() for p in model.parameters()]), flush=True)
dist.destroy_process_group()
"""


def single_process_weights():
    """The same model trained in one process on the global batch (DDP averages the ranks' gradients)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = data()
    for _ in range(DDP_STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()
    return [p.detach().numpy().ravel() for p in model.parameters()]


def without_compiler(tmp_path):
    """A PATH with this venv's Python, cmake and ninja (wrappers) and nothing else: no C++ compiler."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("python", "cmake", "ninja"):
        wrapper = folder / tool
        wrapper.write_text(f"#!/bin/sh\nexec {os.path.join(VENV_BIN, tool)} \"$@\"\n")
        wrapper.chmod(0o755)
    return {"PATH": str(folder), "CXX": "c++"}


def train_ddp(tmp_path, env):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_PROGRAM))
    return run([venv_tool("mpiexec"), "-n", "2", "python", str(script)], timeout=300,
               env=with_hvdlite_importable(dict(os.environ, **env)), cwd=str(tmp_path))


def build_ahead(folder, env=None):
    return run([sys.executable, "-m", "hvdlite.torch.build", "--dir", str(folder)], timeout=600, env=env)


def folder_of(root):
    return os.path.join(str(root), os.path.basename(library_cache.cache_dir()))


@pytest.fixture(scope="module")
def built_ahead():
    """The folder the backend is kept in by default, built ahead by the build command (make runs it first)."""
    root = os.path.dirname(library_cache.cache_dir())
    code, output = build_ahead(root)
    assert code == 0 and "is built in" in output, output
    return root


@pytest.mark.long  # a DDP job; make test keeps the quick verdict below
def test_ddp_trains_with_no_compiler_once_the_backend_is_built_ahead(tmp_path, built_ahead):
    env = dict(without_compiler(tmp_path), HVDLITE_TORCH_EXTENSION_DIR=str(built_ahead))
    code, output = train_ddp(tmp_path, env)
    assert code == 0, output
    assert "compiling" not in output, output
    weights = json.loads(output.split("WEIGHTS ", 1)[1].splitlines()[0])
    for got, expected in zip(weights, single_process_weights()):
        assert np.allclose(got, expected, rtol=1e-10, atol=1e-12), (got, expected)


def test_with_neither_a_build_nor_a_compiler_the_first_process_group_says_what_to_do(tmp_path):
    env = dict(without_compiler(tmp_path), HVDLITE_TORCH_EXTENSION_DIR=str(tmp_path / "empty"))
    started = time.monotonic()
    code, output = train_ddp(tmp_path, env)
    assert code != 0, output
    assert time.monotonic() - started < 120, output
    for words in ("not built for PyTorch", "lacks a C++ compiler", "apt-get install g++",
                  "python -m hvdlite.torch.build"):
        assert words in output, output


@pytest.mark.long  # six program starts
def test_programs_with_different_environments_load_it_without_building_again(tmp_path, built_ahead):
    library = os.path.join(folder_of(built_ahead), library_cache.LIBRARY)
    before = os.stat(library).st_mtime_ns
    load = ("import hvdlite.torch.distributed.extension as e, hvdlite.torch.distributed.library_cache as c, os; "
            "assert os.path.samefile(e.load().__file__, os.path.join(c.cache_dir(), c.LIBRARY)); print('LOADED')")
    programs = [([sys.executable, "-c", load], {"CXX": "g++", "CFLAGS": "-O0"}),
                ([sys.executable, "-m", "hvdlite.torch.build", "--dir", str(built_ahead)], {"CXXFLAGS": "-g"})]
    for _ in range(3):
        for command, extra in programs:
            code, output = run(command, timeout=120, env=dict(extra, HVDLITE_TORCH_EXTENSION_DIR=str(built_ahead)),
                               cwd=str(tmp_path))
            assert code == 0 and "compiling" not in output, output
    assert os.stat(library).st_mtime_ns == before


@pytest.mark.check_long  # two builds of the backend (one killed), minutes on 2 cores
def test_a_build_killed_half_way_blocks_nothing(tmp_path):
    root = tmp_path / "backend"
    env = dict(os.environ, **QUIET_THREADS, HVDLITE_TORCH_EXTENSION_DIR=str(root))
    builder = subprocess.Popen([sys.executable, "-m", "hvdlite.torch.build"], env=env, stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert "compiling the torch.distributed backend" in builder.stderr.readline()
        folder = folder_of(root)
        deadline = time.monotonic() + 120
        while not any(name.endswith(".o") for _, _, files in os.walk(folder) for name in files):
            assert time.monotonic() < deadline and builder.poll() is None, "the build made no object file"
            time.sleep(0.5)
    finally:
        os.killpg(builder.pid, signal.SIGKILL)
        builder.wait()
    assert not os.path.exists(os.path.join(folder, library_cache.STAMP))
    code, output = train_ddp(tmp_path, {"HVDLITE_TORCH_EXTENSION_DIR": str(root)})
    assert code == 0, output
    assert output.count("compiling the torch.distributed backend") == 1, output  # one rank built, one waited
    assert "WEIGHTS" in output, output
    assert not [name for name in os.listdir(folder) if name.startswith("building-")], os.listdir(folder)


# Two trainings: make test-image-cpu runs it in the CPU image (which has no compiler) in make check; here, where
# test_torch_ddp_example.py trains the example on the backend make built, it waits for make check-long.
@pytest.mark.check_long
def test_the_ddp_example_trains_on_a_backend_built_ahead_without_compiling():
    """Where the backend was built ahead (make does it here; the images in their build stage, and their final stage
    has no compiler: make test-image-cpu runs this test there), 2 ranks of the DDP example reach the 1-rank accuracy
    and no process compiles anything."""
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                           "torch_ddp_digits.py")
    if not os.path.exists(example):  # the image's copy of the tests: its examples are installed apart
        example = "/opt/hvdlite/examples/torch_ddp_digits.py"
    accuracies = []
    for nranks in (1, 2):
        code, output = run([sys.executable, "-m", "hvdlite.runner", "-np", str(nranks), sys.executable, example],
                           timeout=300, env=with_hvdlite_importable(dict(os.environ)))
        assert code == 0 and "compiling" not in output, output[-4000:]
        accuracies.append(float(output.rsplit("final test accuracy ", 1)[1].split("%")[0]))
    assert accuracies[1] >= accuracies[0] - 1.0, accuracies
