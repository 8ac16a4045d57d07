"""An elastic PyTorch training on scikit-learn's digits (run by tests/test_elastic.py under hvdliterun).

Commits every --commit-every steps; on the job's first start, rank --kill-rank SIGKILLs itself after step
--kill-at. Rank 0 writes the final parameters' bytes to --out, and every rank appends the step it resumed from
to --out.resumed, so the test can compare against an uninterrupted run.
"""
import argparse
import os
import signal

import torch
from sklearn.datasets import load_digits

import hvdlite.torch as hvd
from hvdlite.elastic.runner import restarts

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--commit-every", type=int, default=1)
parser.add_argument("--kill-at", type=int, default=-1)
parser.add_argument("--kill-rank", type=int, default=1)
args = parser.parse_args()

torch.set_num_threads(1)
hvd.init()
digits = load_digits()
dataset = torch.utils.data.TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32),
                                         torch.tensor(digits.target))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)


@hvd.elastic.run
def train(state):
    with open(args.out + ".resumed", "a") as log:
        log.write(f"{restarts()} {hvd.rank()} {hvd.size()} {state.epoch} {state.step}\n")
    while state.epoch < args.epochs:
        for batch_index, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            sampler.record_batch(batch_index, 32)
            state.step += 1
            if state.step % args.commit_every == 0:
                state.commit()
            if restarts() == 0 and hvd.rank() == args.kill_rank and state.step == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
if hvd.rank() == 0:
    with open(args.out, "wb") as stream:
        stream.write(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
