"""hvdlite.spark.lightning's TorchEstimator on a real PySpark (local[2]) and Lightning's Trainer over hvdlite's
torch.distributed backend, on scikit-learn's digits as a DataFrame: fit trains a LightningModule on 2 ranks to the
accuracy of the same module trained in one process on the same rows (within TOLERANCE), transform's predictions are
the trained module's applied in this process, a module of the pytorch_lightning package trains too and fit returns
its ModelCheckpoint's best model, the parameters the module owns are refused by name before any rank starts, and a rank that fails ends fit with its error, the run then resuming from Lightning's checkpoint in the
Store."""
import os
import sys

import cloudpickle
import lightning as L
import numpy as np
import pytest
import torch

from estimator_cases import (BATCH, EPOCHS, LR, SEED, TOLERANCE, by_id, fails_then_resumes, prepared_paths,
                             torch_accuracy_alone)
from hvdlite.spark.common.store import Store
from hvdlite.spark.lightning import TorchEstimator, TorchModel

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.long


def digits_module(package):
    """The module, a LightningModule of package (lightning.pytorch, or pytorch_lightning: the name Horovod's users
    wrote, whose classes are distinct)."""

    class Digits(package.LightningModule):
        """Horovod's Lightning Estimator convention: batches are dicts of column name to tensor."""

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

        def forward(self, x):
            return self.layers(x)

        def training_step(self, batch, _):
            loss = torch.nn.functional.cross_entropy(self(batch["features"]), batch["label"].long())
            self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
            return loss

        def validation_step(self, batch, _):
            accuracy = (self(batch["features"]).argmax(1) == batch["label"]).float().mean()
            self.log("val_accuracy", accuracy, on_epoch=True, sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)

    return Digits


def fresh_module(package=L):
    torch.manual_seed(SEED)
    return digits_module(package)()


def estimator(store, **changes):
    settings = dict(num_proc=2, model=fresh_module(), store=store, feature_cols=["features"], label_cols=["label"],
                    validation="is_val", batch_size=BATCH, epochs=EPOCHS, random_seed=SEED, verbose=0)
    settings.update(changes)
    return TorchEstimator(**settings)


def single_process_accuracy(store, train_path, val_path):
    """The same module trained in this process on the fit's training rows."""
    module = fresh_module()
    return torch_accuracy_alone(module, module.configure_optimizers(), store, train_path, val_path)


def test_fit_trains_to_the_single_process_accuracy_and_transform_predicts_as_the_module(spark, digits, tmp_path,
                                                                                        job_token):
    store = Store.create(str(tmp_path / "store"))
    trained = estimator(store).fit(digits)
    assert isinstance(trained, TorchModel)
    history = trained.getHistory()
    assert len(history["train_loss"]) == EPOCHS and history["train_loss"][-1] < history["train_loss"][0], history
    alone = single_process_accuracy(store, *prepared_paths(store))
    assert alone > 0.85, alone
    print(f"validation accuracy: 2 ranks {history['val_accuracy'][-1]:.4f}, one process {alone:.4f}")
    assert abs(history["val_accuracy"][-1] - alone) <= TOLERANCE, (history["val_accuracy"], alone)

    got = by_id(trained.transform(digits), "label__output")
    x = np.array([r.features.toArray() for r in sorted(digits.select("id", "features").collect())], np.float32)
    with torch.no_grad():
        expected = trained.getModel()(torch.as_tensor(x)).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_pytorch_lightning_module_trains_and_fit_returns_its_model_checkpoints_best(spark, digits, tmp_path,
                                                                                     job_token):
    """pytorch_lightning (the package Horovod's users import) with a ModelCheckpoint, as Horovod takes it: fit
    returns the checkpoint's best model. Its monitor keeps the lowest validation accuracy (an epoch before the last),
    so that the final weights cannot pass for it; rank 0 saves each epoch's weights to compare."""
    import pytorch_lightning
    from pytorch_lightning.callbacks import ModelCheckpoint

    class SaveEachEpoch(pytorch_lightning.Callback):
        def on_train_epoch_end(self, trainer, module):
            if trainer.global_rank == 0:
                torch.save(module.state_dict(), os.path.join(str(tmp_path), f"epoch{trainer.current_epoch}.pt"))

    store = Store.create(str(tmp_path / "store"))
    trained = estimator(store, model=fresh_module(pytorch_lightning), epochs=3, inmemory_cache_all=True,
                        callbacks=[ModelCheckpoint(monitor="val_accuracy", mode="min"), SaveEachEpoch()]).fit(digits)
    history = trained.getHistory()
    assert isinstance(trained.getModel(), pytorch_lightning.LightningModule)
    assert len(history["train_loss"]) == 3 and history["train_loss"][-1] < history["train_loss"][0], history
    worst = int(np.argmin(history["val_accuracy"]))
    assert worst < 2 and history["val_accuracy"][worst] < history["val_accuracy"][-1], history
    saved = torch.load(os.path.join(str(tmp_path), f"epoch{worst}.pt"))
    returned = trained.getModel().state_dict()
    assert saved.keys() == returned.keys()
    for name in saved:
        torch.testing.assert_close(returned[name], saved[name], rtol=0, atol=0)


def test_what_the_module_owns_and_petastorms_options_are_refused_before_any_rank_starts(spark, digits, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="cannot honour optimizer"):
        estimator(store, optimizer=torch.optim.SGD(fresh_module().parameters(), lr=0.1)).fit(digits)
    with pytest.raises(ValueError, match="cannot honour data_module"):
        estimator(store, data_module=object()).fit(digits)
    with pytest.raises(ValueError, match="column 'featurez' is not in the DataFrame"):
        estimator(store, feature_cols=["featurez"]).fit(digits)
    assert not os.path.exists(tmp_path / "store") or not os.listdir(tmp_path / "store"), os.listdir(tmp_path / "store")


@pytest.mark.check_long  # make check trains each Estimator (the tests above); further fits: make check-long
def test_a_failing_rank_fails_fit_with_its_error_and_the_run_resumes_from_its_checkpoint(spark, digits, tmp_path,
                                                                                         job_token):
    store = Store.create(str(tmp_path / "store"))
    fails_then_resumes(estimator, store, digits, "checkpoint.ckpt", "train_loss", bound_s=120)
