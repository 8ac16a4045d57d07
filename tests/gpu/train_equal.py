"""GPU check (c) of tests/gpu/run.sh: DistributedOptimizer training of a small CNN on 8x8 images labelled by a
fixed random teacher, the same steps on CUDA tensors (through NCCL) and on CPU tensors (through host memory),
must end with the same parameters within float32 tolerance on every rank.

    mpiexec -n N python tests/gpu/train_equal.py [--device cuda|cpu]
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

import hvdlite.torch as hvd

STEPS, BATCH = 60, 32


class Net(torch.nn.Module):
    """Two 3x3 convolutions and two dense layers for 8x8 images, as examples/torch_digits.py."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def data():
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(2048, 1, 8, 8, generator=generator)
    teacher = torch.randn(64, 10, generator=generator)
    return images, (images.flatten(1) @ teacher).argmax(1)


def train(device, images, labels):
    torch.manual_seed(0)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    rank, size = hvd.rank(), hvd.size()
    for step in range(STEPS):
        start = (step * size + rank) * BATCH % (len(images) - BATCH)
        x = images[start:start + BATCH].to(device)
        y = labels[start:start + BATCH].to(device)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return {name: p.detach().cpu().double() for name, p in model.state_dict().items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    hvd.init()
    if args.device == "cuda":
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        assert hvd.nccl_built(), hvd.gpu_status()
    images, labels = data()
    on_device = train(args.device, images, labels)
    on_cpu = train("cpu", images, labels)
    worst = max(float((on_device[k] - on_cpu[k]).abs().max() / (on_cpu[k].abs().max() + 1e-12)) for k in on_cpu)
    ok = worst < 1e-3
    print(f"rank {hvd.rank()}: {STEPS} steps on {args.device} vs cpu: largest relative difference of a parameter "
          f"{worst:.2e} ({'ok' if ok else 'FAILED'})", flush=True)
    same = hvd.allgather_object(float(np.round(sum(float(v.sum()) for v in on_device.values()), 6)))
    if len(set(same)) != 1:
        print(f"rank {hvd.rank()}: the ranks' parameters differ: {same}", flush=True)
        ok = False
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
