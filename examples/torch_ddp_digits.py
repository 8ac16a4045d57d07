"""torch.distributed DDP training of a small CNN on scikit-learn's handwritten digits, on hvdlite's backend.

A plain DDP script, as torchrun would run it: the only hvdlite lines are the import and the backend's name.
  1. init_process_group("hvdlite"); 2. shard the data with DistributedSampler; 3. scale the learning rate by the
  world size; 4. wrap the model in DistributedDataParallel (it broadcasts rank 0's parameters); 5. average metrics
  with all_reduce. With --checkpoint, rank 0 saves the model, optimizer and epoch after each epoch and every rank
  resumes from it at start: the pattern with which hvdliterun's restarts (--max-restarts) continue a DDP job.

Run:  hvdliterun -np 2 python examples/torch_ddp_digits.py    (or mpiexec -n 2 ..., or plain python for 1 rank)
"""
import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

import hvdlite.torch  # noqa: E402,F401  (registers the "hvdlite" backend)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="hvdlite", help="hvdlite, or gloo to compare")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="rows per rank and step")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank (scaled by world size)")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--checkpoint", help="file to save each epoch to and to resume from")
    return parser.parse_args()


class DigitsNet(nn.Module):
    """Two 3x3 convolutions and two dense layers for 8x8 grey images (the model of torch_digits.py: each example
    stands alone, to be copied)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(seed):
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(digits.target, dtype=torch.int64)
    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=0.2, random_state=seed,
                                           stratify=digits.target)
    return (TensorDataset(images[train_idx], labels[train_idx]), TensorDataset(images[test_idx], labels[test_idx]))


def global_sum(value):
    t = torch.tensor(float(value), dtype=torch.float64)
    dist.all_reduce(t)
    return t.item()


def main():
    args = parse_args()
    if "RANK" not in os.environ and "PMI_RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29512", RANK="0", WORLD_SIZE="1")  # plain python
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    train_set, test_set = load_data(args.seed)
    sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    test_sampler = DistributedSampler(test_set, num_replicas=size, rank=rank, shuffle=False)
    test_loader = DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = DDP(DigitsNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    first_epoch = 1
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, weights_only=False)  # every rank reads rank 0's file
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        first_epoch = saved["epoch"] + 1
        if rank == 0:
            print(f"resumed after epoch {saved['epoch']}", flush=True)

    start = time.time()
    accuracy = 0.0
    for epoch in range(first_epoch, args.epochs + 1):
        model.train()
        sampler.set_epoch(epoch)
        loss_sum = 0.0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item()
        train_loss = global_sum(loss_sum / len(loader)) / size

        model.eval()
        correct = count = test_loss = 0.0
        with torch.no_grad():
            for images, labels in test_loader:
                logits = model(images)
                correct += (logits.argmax(1) == labels).sum().item()
                test_loss += F.cross_entropy(logits, labels, reduction="sum").item()
                count += len(labels)
        total = global_sum(count)
        accuracy = global_sum(correct) / total
        test_loss = global_sum(test_loss) / total
        if rank == 0:
            print(f"epoch {epoch:2d}  train loss {train_loss:.4f}  test loss {test_loss:.4f}  "
                  f"test accuracy {100 * accuracy:.2f}%", flush=True)
            if args.checkpoint:
                state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "epoch": epoch}
                torch.save(state, args.checkpoint + ".tmp")
                os.replace(args.checkpoint + ".tmp", args.checkpoint)  # a restart never reads half a file
        dist.barrier()  # the checkpoint is complete before any rank goes on (or is restarted)
    if rank == 0:
        print(f"ranks {size}  backend {args.backend}  time {time.time() - start:.1f}s  "
              f"final test accuracy {100 * accuracy:.2f}%", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
