"""An elastic PyTorch training on scikit-learn's digits (run by tests/test_elastic.py under hvdliterun).

Commits every --commit-every steps. On the job's first start, rank --kill-rank SIGKILLs itself after step
--kill-at (after writing --shrink-to into the discovery file, if given). With --grow-to, rank 0 writes that
into the discovery file after step --grow-at of a start on fewer ranks. Every rank logs the step it resumed from
(<out>.resumed), the reset callbacks it ran (<out>.resets) and the sample ids of each step (<out>.samples); rank 0
writes the final parameters' bytes to --out.
"""
import os
import signal
import time

import torch
from sklearn.datasets import load_digits

import hvdlite.torch as hvd
from hvdlite.elastic.resume import restarts

import worker_arguments  # beside this script

parser = worker_arguments.parser()
parser.add_argument("--discovery-file")
parser.add_argument("--shrink-to")
parser.add_argument("--grow-to")
parser.add_argument("--grow-at", type=int, default=-1)
parser.add_argument("--step-seconds", type=float, default=0.0, help="pace of the steps (time for news to arrive)")
parser.add_argument("--samples", type=int, default=1792)  # 56 batches of 32: whole batches on 1 and 2 ranks
args = parser.parse_args()
BATCH = 32


def append(suffix, line):
    with open(args.out + suffix, "a") as log:
        log.write(line + "\n")


torch.set_num_threads(1)
hvd.init()
digits = load_digits()
dataset = torch.utils.data.TensorDataset(torch.tensor(digits.data[:args.samples] / 16.0, dtype=torch.float32),
                                         torch.tensor(digits.target[:args.samples]),
                                         torch.arange(args.samples))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler)
state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
state.register_reset_callbacks([lambda: append(".resets", f"{restarts()} {hvd.rank()} {hvd.size()}")])


def write_discovery(text):
    with open(args.discovery_file + ".tmp", "w") as stream:
        stream.write(text + "\n")
    os.replace(args.discovery_file + ".tmp", args.discovery_file)


@hvd.elastic.run
def train(state):
    append(".resumed", f"{restarts()} {hvd.rank()} {hvd.size()} {state.epoch} {state.step}")
    while state.epoch < args.epochs:
        for batch_index, (x, y, ids) in enumerate(loader):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            time.sleep(args.step_seconds)
            sampler.record_batch(batch_index, BATCH)
            state.step += 1
            append(".samples", f"{state.epoch} {state.step} {hvd.rank()} " + ",".join(map(str, ids.tolist())))
            if args.grow_to and hvd.rank() == 0 and hvd.size() == 1 and state.step == args.grow_at:
                write_discovery(args.grow_to)
            if state.step % args.commit_every == 0:
                state.commit()
            if restarts() == 0 and hvd.rank() == args.kill_rank and state.step == args.kill_at:
                if args.shrink_to:
                    write_discovery(args.shrink_to)
                os.kill(os.getpid(), signal.SIGKILL)
        state.epoch += 1
        sampler.set_epoch(state.epoch)
        state.commit()


train(state)
if hvd.rank() == 0:
    with open(args.out, "wb") as stream:
        stream.write(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
