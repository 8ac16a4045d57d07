"""GPU check (e) of tests/gpu/run.sh: elastic commits of a model and an optimizer that live on the GPU.

On 2 ranks of one host: the host's writer, whose tensors go from the GPU straight into the host's memory slot, and
a rank that keeps its own copy. After DistributedOptimizer steps on CUDA (Adam; a bfloat16 buffer changed every
step), commit, more steps, then restore(): every parameter, buffer and Adam state tensor is back, on its GPU and
bitwise as committed; and the commit read back as a restarted job reads it (commits.agree_and_load) and loaded
into a fresh model on the GPU gives the same, also for six more commits each followed at once by a step (the
writer's commits reach the host's memory in the background).

    mpiexec -n 2 python tests/gpu/elastic_commit.py [--device cuda|cpu]
"""
import argparse
import os
import sys
import tempfile

import torch

import hvdlite.torch as hvd
from hvdlite.elastic import commits


def build(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    model.register_buffer("scale", torch.linspace(0, 1, 10, dtype=torch.bfloat16, device=device))
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    return model, optimizer


def everything(model, optimizer):
    """Copies of every tensor of the model's state dict and of the optimizer's state."""
    return [t.detach().clone() for t in model.state_dict().values()] + [
        t.clone() for p in model.parameters() for t in optimizer.state[p].values()]


def compare(what, got, want):
    """A line per tensor that differs (dtype, device or any bit), or none."""
    problems = []
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.dtype != w.dtype or g.device != w.device or not torch.equal(g, w):
            problems.append(f"{what}: tensor {index}: got {g.dtype} on {g.device}, committed {w.dtype} on {w.device}"
                            f"{'' if g.dtype != w.dtype or g.device != w.device else ', values differ'}")
    return problems


def committed_and_restored(device):
    """Lines saying what differs after restore() and after reading the commit back (none: all equal)."""
    model, optimizer = build(device)
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)

    def train_step(seed):
        generator = torch.Generator().manual_seed(10 * seed + hvd.rank())
        x = torch.randn(16, 32, generator=generator).to(device)
        optimizer.zero_grad()
        (model(x) * model.scale.float()).square().mean().backward()
        optimizer.step()
        with torch.no_grad():
            model.scale += 0.125

    train_step(1)
    state.commit()
    train_step(2)
    state.epoch = 1
    state.commit()
    committed = everything(model, optimizer)
    train_step(3)
    state.epoch = 5
    state.restore()
    problems = compare("restore()", everything(model, optimizer), committed)
    if state.epoch != 1:
        problems.append(f"restore(): epoch {state.epoch}, committed 1")

    sequence, payload = commits.agree_and_load()
    fresh_model, fresh_optimizer = build(device)
    fresh = hvd.elastic.TorchState(fresh_model, fresh_optimizer, epoch=0)
    fresh.load_snapshot(payload["state"])
    problems += compare("commit read back", everything(fresh_model, fresh_optimizer), committed)
    if sequence != 2 or fresh.epoch != 1:
        problems.append(f"commit read back: sequence {sequence}, epoch {fresh.epoch}; committed 2 and 1")
    for step in range(4, 10):  # both memory slots in turn, the live state changed while a commit is still moving
        train_step(step)
        state.commit()
        committed = everything(model, optimizer)
        train_step(100 + step)
        sequence, payload = commits.agree_and_load()
        fresh.load_snapshot(payload["state"])
        problems += compare(f"commit {sequence} read back", everything(fresh_model, fresh_optimizer), committed)
    hvd.allreduce(torch.zeros(1), name="elastic_check.done")  # every rank done with the host's commits
    if commits.writes_here():
        commits.remove()  # as hvd.elastic.run does when a job ends: the host's writer, once
    return problems, len(committed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    os.environ.setdefault("HVDLITE_ELASTIC_COMMIT_DIR", tempfile.mkdtemp(prefix="hvdlite-gpu-elastic-"))
    hvd.init()
    device = torch.device(args.device)
    if args.device == "cuda":
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    kind = "writes the host's memory copy" if commits.writes_here() else "keeps its own copy"
    problems, count = committed_and_restored(device)
    for line in problems:
        print(f"rank {hvd.rank()}: {line}", flush=True)
    print(f"rank {hvd.rank()} ({kind}): {count} tensors on {device}: {'ok' if not problems else 'FAILED'}",
          flush=True)
    hvd.shutdown()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
