"""torch.distributed.checkpoint (DCP) on the "hvdlite" backend: an FSDP2 model and its optimizer saved by 2 ranks,
each writing its own shards, and loaded by 3 ranks, which reshard them: every parameter and optimizer state equal to
what was saved (checked against the full tensors that the 2-rank job also wrote with torch.save on rank 0).
"""
import os
import sys
import textwrap

import pytest
import torch

from harness.processes import run, with_hvdlite_importable

HVDLITERUN = [sys.executable, "-m", "hvdlite.runner"]

PROGRAM = """
import sys
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import hvdlite.torch  # noqa: F401

mode, folder = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
dist.init_process_group("hvdlite")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0 if mode == "save" else 123)  # the loading job starts from other values
model = nn.Sequential(nn.Linear(12, 30), nn.ReLU(), nn.Linear(30, 5))
mesh = init_device_mesh("cpu", (size,))
for layer in model:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
if mode == "save":
    for step in range(3):
        g = torch.Generator().manual_seed(10 * step + rank)
        model(torch.randn(4, 12, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    model_state, opt_state = get_state_dict(model, opt)
    dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=folder)
    full = {name: p.full_tensor() for name, p in model.named_parameters()}
    moments = {name: opt.state[p]["exp_avg"].full_tensor() for name, p in model.named_parameters()}
    if rank == 0:
        torch.save({"params": full, "exp_avg": moments}, folder + "/full.pt")
else:
    model_state, opt_state = get_state_dict(model, opt)
    state = {"model": model_state, "optim": opt_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    saved = torch.load(folder + "/full.pt")
    for name, p in model.named_parameters():
        assert p.to_local().shape[0] <= -(-p.shape[0] // size), "sharded three ways"
        assert torch.equal(p.full_tensor(), saved["params"][name]), name
        assert torch.equal(opt.state[p]["exp_avg"].full_tensor(), saved["exp_avg"][name]), name
    with open(f"{folder}/loaded.{rank}", "w") as f:
        f.write(f"rank {rank} of {size}: loaded and equal")
dist.destroy_process_group()
"""


# Two whole jobs (make check); make test trains FSDP2 on the backend (test_torch_distributed_training.py).
@pytest.mark.long
def test_saved_by_two_ranks_loaded_by_three(tmp_path):
    program = tmp_path / "dcp_program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    folder = tmp_path / "checkpoint"
    env = with_hvdlite_importable(dict(os.environ))
    code, output = run(HVDLITERUN + ["-np", "2", sys.executable, str(program), "save", str(folder)], 240, env=env)
    assert code == 0, output[-5000:]
    shards = [name for name in os.listdir(folder) if name.endswith(".distcp")]
    assert len(shards) == 2, f"each of the 2 ranks writes its own shards: {os.listdir(folder)}"
    code, output = run(HVDLITERUN + ["-np", "3", sys.executable, str(program), "load", str(folder)], 240, env=env)
    assert code == 0, output[-5000:]
    assert [(folder / f"loaded.{r}").read_text() for r in range(3)] == \
        [f"rank {r} of 3: loaded and equal" for r in range(3)], output[-5000:]
    assert torch.load(folder / "full.pt")["params"], "the reference was written"
