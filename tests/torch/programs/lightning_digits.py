"""Lightning's Trainer with DDPStrategy(process_group_backend="hvdlite") trains an MLP on the digits (run by
tests/torch/test_torch_distributed_ecosystem.py under hvdliterun and torchrun, its size from WORLD_SIZE; one rank:
no strategy)."""
import os, sys
import torch, torch.nn as nn, torch.nn.functional as F
import lightning as L
from lightning.pytorch.strategies import DDPStrategy
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset
import hvdlite.torch  # noqa
import torch.distributed as dist

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    def training_step(self, batch, _):
        x, y = batch
        return F.cross_entropy(self.net(x), y)
    def validation_step(self, batch, _):
        x, y = batch
        acc = (self.net(x).argmax(1) == y).float().mean()
        self.log("acc", acc, sync_dist=True, on_epoch=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

d = load_digits()
x = torch.tensor(d.images / 16.0, dtype=torch.float32); y = torch.tensor(d.target)
train, test = TensorDataset(x[:1400], y[:1400]), TensorDataset(x[1400:], y[1400:])
size = int(os.environ.get("WORLD_SIZE", "1"))
L.seed_everything(0)
trainer = L.Trainer(accelerator="cpu", devices=size, num_nodes=1, max_epochs=10, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    strategy=DDPStrategy(process_group_backend="hvdlite") if size > 1 else "auto")
model = Net()
trainer.fit(model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(test, batch_size=100))
res = trainer.validate(model, DataLoader(test, batch_size=100), verbose=False)
if trainer.global_rank == 0:
    print("backend", dist.get_backend() if dist.is_initialized() else None, "world", trainer.world_size,
          "accuracy", res[0]["acc"], flush=True)
