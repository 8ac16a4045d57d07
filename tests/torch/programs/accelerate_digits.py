"""Hugging Face Accelerate on the hvdlite backend: the process group made first, which the Accelerator then uses
(its CPU mode picks gloo or mpi itself); trains an MLP on the digits (run by
tests/torch/test_torch_distributed_ecosystem.py under hvdliterun and torchrun)."""
import os
import torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import set_seed
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset
import hvdlite.torch  # noqa

if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    dist.init_process_group("hvdlite")  # before the Accelerator, which then uses this process group
acc = Accelerator(cpu=True)
set_seed(0)
d = load_digits()
x = torch.tensor(d.images / 16.0, dtype=torch.float32); y = torch.tensor(d.target)
train, test = TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model, opt, tl, vl = acc.prepare(model, opt, DataLoader(train, batch_size=32, shuffle=True), DataLoader(test, batch_size=100))
for epoch in range(10):
    model.train()
    for xb, yb in tl:
        opt.zero_grad(); loss = F.cross_entropy(model(xb), yb); acc.backward(loss); opt.step()
model.eval(); correct = total = 0
with torch.no_grad():
    for xb, yb in vl:
        p, t = acc.gather_for_metrics((model(xb).argmax(1), yb))
        correct += (p == t).sum().item(); total += len(t)
if acc.is_main_process:
    print("backend", dist.get_backend() if dist.is_initialized() else None, "world", acc.num_processes,
          "accuracy", correct / total, flush=True)
