"""What each rank of a Lightning TorchEstimator's fit runs: Lightning's Trainer with its DDP strategy on hvdlite's
torch.distributed backend (the ranks are hvdlite's: HvdliteEnvironment), the LightningModule from the driver (or
the run's last checkpoint, which Lightning restores with the trainer's state), batches of this rank's share of the
Store's Parquet as dicts of tensors (hvdlite/spark/common/reader.py), the same number of training and validation
steps on every rank, and a checkpoint a epoch written by rank 0 to the Store. Rank 0 returns the history and the
final weights; the others None.

A module may come from either of Lightning's packages, ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning``
(the name Horovod's users wrote): their classes are distinct and a Trainer takes only its own package's modules,
callbacks and environments, so the Trainer and this file's Lightning classes are the module's package's."""
import io
import math
import os
import posixpath
import socket
import tempfile

import functools
import importlib

import torch

import hvdlite.torch as hvd
from hvdlite.runner.report_port import ipv4_addresses
from hvdlite.spark.common import reader
from hvdlite.spark.torch.remote import batch_tensors


def train(spec):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    model = spec["model"]
    pl = lightning_package(model)
    if spec["random_seed"] is not None:
        pl.seed_everything(spec["random_seed"], workers=True, verbose=False)
    columns = {name: meta["shape"] for name, meta in spec["metadata"].items()}
    groups, val_groups = reader.fit_data(spec)
    steps = spec["train_steps_per_epoch"] or max(1, groups.rows // (size * spec["batch_size"]))
    # Validation in the same number of steps on every rank too: a LightningModule may log with sync_dist, an
    # all-reduce in each step.
    val_steps = spec["validation_steps_per_epoch"] or (
        max(1, val_groups.rows // (size * spec["val_batch_size"])) if val_groups else 0)
    to_tensors = functools.partial(batch_tensors, features=spec["feature_cols"], shapes=spec["input_shapes"],
                                   transformation_fn=spec["transformation_fn"])
    train_data = _Batches(groups, columns, rank, size, spec["batch_size"], steps, spec["random_seed"],
                          spec["shuffle"], to_tensors)
    val_data = _Batches(val_groups, columns, rank, size, spec["val_batch_size"], val_steps, spec["random_seed"], False,
                        to_tensors) if val_groups else None

    with tempfile.TemporaryDirectory() as folder:
        resume_from = None
        if spec["checkpoint"] is not None:
            resume_from = os.path.join(folder, "resume.ckpt")
            with open(resume_from, "wb") as stream:
                stream.write(spec["checkpoint"])
        history = lightning_class(pl, History)(rank, spec, train_data, os.path.join(folder, "epoch.ckpt"))
        accelerator = "gpu" if spec["use_gpu"] and torch.cuda.is_available() else "cpu"
        strategy = _part(pl, "strategies").DDPStrategy(
            process_group_backend="hvdlite", cluster_environment=lightning_class(pl, HvdliteEnvironment)())
        arguments = {"accelerator": accelerator, "devices": [hvd.local_rank()] if accelerator == "gpu" else 1,
                     "num_nodes": size, "strategy": strategy, "max_epochs": spec["epochs"], "logger": False,
                     "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
                     "use_distributed_sampler": False, "limit_train_batches": steps,
                     "limit_val_batches": val_steps if val_data else 0, "num_sanity_val_steps": 0,
                     "accumulate_grad_batches": spec["backward_passes_per_step"],
                     **(spec["trainer_args"] or {})}
        arguments["callbacks"] = [*(arguments.get("callbacks") or []), *(spec["callbacks"] or []), history]
        best = _checkpoint_callback(pl, arguments, os.path.join(folder, "best"))
        trainer = pl.Trainer(**arguments)
        loader = torch.utils.data.DataLoader
        trainer.fit(model, loader(train_data, batch_size=None), loader(val_data, batch_size=None) if val_data else None,
                    ckpt_path=resume_from)
        result = None
        if rank == 0:
            weights = model.state_dict()
            if best is not None and best.best_model_path:
                weights = torch.load(best.best_model_path, map_location="cpu", weights_only=False)["state_dict"]
            buffer = io.BytesIO()
            torch.save(weights, buffer)
            result = (history.history, buffer.getvalue())
    return result


def _checkpoint_callback(pl, arguments, folder):
    """The user's ModelCheckpoint among the trainer's callbacks, if any, as Horovod takes it: checkpointing is then
    on, its files go to this rank's folder (not the executor's working directory), and the model fit returns is its
    best one. None without one."""
    model_checkpoint = _part(pl, "callbacks").ModelCheckpoint
    found = next((c for c in arguments["callbacks"] if isinstance(c, model_checkpoint)), None)
    if found is not None:
        arguments["enable_checkpointing"] = True
        found.dirpath = folder
    return found


def lightning_package(module):
    """lightning.pytorch, or pytorch_lightning where the module's class comes from that package."""
    if any(cls.__module__.startswith("pytorch_lightning.") for cls in type(module).__mro__):
        return importlib.import_module("pytorch_lightning")
    return importlib.import_module("lightning.pytorch")


def _part(pl, name):
    """A module of the Lightning package pl (not all are imported with it)."""
    return importlib.import_module(f"{pl.__name__}.{name}")


@functools.lru_cache(maxsize=None)
def lightning_class(pl, body):
    """body (a class of this file's methods) made a subclass of its Lightning base in package pl."""
    base = {"HvdliteEnvironment": _part(pl, "plugins.environments").ClusterEnvironment,
            "History": pl.Callback}[body.__name__]
    return type(body.__name__, (body, base), {"__doc__": body.__doc__})


class HvdliteEnvironment:
    """Lightning's view of an hvdlite job (a ClusterEnvironment): the ranks are hvdlite's (started by Spark, not by
    Lightning), each its own node of one device, so that ranks placed unevenly on hosts still make one world; rank
    0's address and a free port of its host for torch's store, agreed over hvdlite."""

    def __init__(self):
        super().__init__()
        self._rank, self._size = hvd.rank(), hvd.size()
        address = None
        if self._rank == 0:
            with socket.socket() as probe:
                probe.bind(("", 0))
                address = (_host_address(single_host=hvd.local_size() == self._size), probe.getsockname()[1])
        self._address, self._port = hvd.broadcast_object(address, root_rank=0, name="hvdlite.lightning.main")

    @property
    def creates_processes_externally(self):
        return True

    @property
    def main_address(self):
        return self._address

    @property
    def main_port(self):
        return self._port

    @staticmethod
    def detect():
        return True

    def world_size(self):
        return self._size

    def set_world_size(self, size):
        pass  # the job's size is hvdlite's

    def global_rank(self):
        return self._rank

    def set_global_rank(self, rank):
        pass

    def local_rank(self):
        return 0

    def node_rank(self):
        return self._rank


def _host_address(single_host):
    """An address of rank 0's host that the other ranks reach: loopback where they all run on it; else MASTER_ADDR
    where it names a host (a Spark job's ranks get their rank 0's host's address), else this host's first IPv4
    address."""
    if single_host:
        return "127.0.0.1"
    named = os.environ.get("MASTER_ADDR")
    if named:
        try:
            socket.gethostbyname(named)
            return named
        except OSError:
            pass
    return next(iter(ipv4_addresses()), socket.getfqdn())


class _Batches(torch.utils.data.IterableDataset):
    """This rank's batches of one epoch (the epoch set before each pass by History), as a data set a DataLoader
    takes whole (batch_size=None)."""

    def __init__(self, groups, columns, rank, size, batch_size, steps, seed, shuffle, to_tensors):
        super().__init__()
        self.groups, self.columns, self.rank, self.size = groups, columns, rank, size
        self.batch_size, self.steps, self.seed, self.shuffle = batch_size, steps, seed, shuffle
        self.to_tensors, self.epoch = to_tensors, 0

    def __iter__(self):
        for batch in reader.batches(self.groups, self.columns, self.rank, self.size, self.batch_size, self.steps,
                                    self.seed, self.epoch, self.shuffle):
            yield self.to_tensors(batch)

    def __len__(self):
        return self.steps


class History:
    """A Lightning Callback: each epoch's logged figures (rank 0's, which sync_dist makes every rank's), the epoch the training
    batches are shuffled for, and the Store's checkpoint each epoch; its state rides in Lightning's checkpoint,
    so a resumed run keeps the history before it."""

    def __init__(self, rank, spec, train_data, local_file):
        self.rank, self.spec, self.train_data, self.local_file = rank, spec, train_data, local_file
        self.history = {}

    def on_train_epoch_start(self, trainer, module):
        self.train_data.epoch = trainer.current_epoch

    def on_train_epoch_end(self, trainer, module):
        for key, value in trainer.callback_metrics.items():
            self.history.setdefault(key, []).append(float(value))
        if self.spec["verbose"] and self.rank == 0:
            figures = ", ".join(f"{k} {v[-1]:.4f}" for k, v in self.history.items())
            print(f"epoch {trainer.current_epoch + 1}/{self.spec['epochs']}: {figures}", flush=True)
        trainer.save_checkpoint(self.local_file)  # every rank calls it; rank 0 writes
        if self.rank == 0:
            with open(self.local_file, "rb") as stream:
                self.spec["store"].write(posixpath.join(self.spec["checkpoint_path"], self.spec["checkpoint_name"]),
                                         stream.read())
        loss = trainer.callback_metrics.get("train_loss", trainer.callback_metrics.get("loss"))
        if self.spec["terminate_on_nan"] and loss is not None and not math.isfinite(float(loss)):
            trainer.should_stop = True

    def state_dict(self):
        return {"history": self.history}

    def load_state_dict(self, state):
        self.history = state["history"]
