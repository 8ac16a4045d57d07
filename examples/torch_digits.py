"""Data-parallel training of a small CNN on scikit-learn's handwritten digits with hvdlite.torch.

The Horovod recipe, unchanged but for the import line:
  1. hvd.init(); 2. shard the data by rank; 3. scale the learning rate by hvd.size();
  4. broadcast the initial parameters and optimizer state from rank 0; 5. wrap the optimizer in
  hvd.DistributedOptimizer; 6. average metrics over the ranks.

Run:  hvdliterun -np 2 python examples/torch_digits.py      (or plain `python examples/torch_digits.py`)
"""
import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="rows per rank and step")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank (scaled by size)")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


class DigitsNet(nn.Module):
    """Two 3x3 convolutions and two dense layers for 8x8 grey images."""

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
    return (images[train_idx], labels[train_idx]), (images[test_idx], labels[test_idx])


def metric_sum(value, name):
    """Sums a scalar over the ranks (metric averaging: sum numerators and denominators, then divide)."""
    return hvd.allreduce(torch.tensor(float(value), dtype=torch.float64), op=hvd.Sum, name=name).item()


def train(epochs=20, batch_size=32, lr=0.05, momentum=0.9, seed=42):
    """Trains on this rank's shard; returns (size, final test accuracy over every rank's shard)."""
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rank, size = hvd.rank(), hvd.size()

    (x_train, y_train), (x_test, y_test) = load_data(seed)
    x_train, y_train = x_train[rank::size], y_train[rank::size]          # this rank's shard
    x_test, y_test = x_test[rank::size], y_test[rank::size]
    # every rank must run the same number of steps: size them by the smallest shard
    steps_per_epoch = (len(load_digits().target) * 4 // 5 // size) // batch_size

    model = DigitsNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * size, momentum=momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * steps_per_epoch)

    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    start = time.time()
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(x_train), generator=generator)
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            batch = order[step * batch_size:(step + 1) * batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item()
        train_loss = metric_sum(loss_sum / steps_per_epoch, "train_loss") / size

        model.eval()
        with torch.no_grad():
            logits = model(x_test)
            correct = (logits.argmax(1) == y_test).sum().item()
            test_loss = F.cross_entropy(logits, y_test, reduction="sum").item()
        total = metric_sum(len(y_test), "test_count")
        accuracy = metric_sum(correct, "test_correct") / total
        test_loss = metric_sum(test_loss, "test_loss") / total
        if rank == 0:
            print(f"epoch {epoch:2d}  train loss {train_loss:.4f}  test loss {test_loss:.4f}  "
                  f"test accuracy {100 * accuracy:.2f}%", flush=True)
    if rank == 0:
        print(f"ranks {size}  steps/epoch {steps_per_epoch}  time {time.time() - start:.1f}s  "
              f"final test accuracy {100 * accuracy:.2f}%", flush=True)
    return size, accuracy


def main():
    args = parse_args()
    train(args.epochs, args.batch_size, args.lr, args.momentum, args.seed)


if __name__ == "__main__":
    main()
