"""horovod.spark.lightning's TorchEstimator on hvdlite: ``TorchEstimator(model=lightning_module, ...).fit(df)``
writes the DataFrame's columns to Parquet in the Store, runs Lightning's Trainer on ``num_proc`` ranks in Spark tasks
over hvdlite's torch.distributed backend (hvdlite/spark/lightning/remote.py), and returns a TorchModel whose
``transform(df)`` adds the module's predictions (its forward) as columns. The module computes its own loss
(training_step) and makes its own optimizer (configure_optimizers); its batches are dicts of column name to
tensor."""
import copy
import io

import torch
from pyspark import keyword_only

from hvdlite.spark.common.estimator import EstimatorBase, set_kwargs
from hvdlite.spark.common.params import ESTIMATOR_PARAMS, add_params
from hvdlite.spark.torch.estimator import TorchModel

# The oldest Lightning this Estimator runs on (horovod.spark.lightning.estimator's name; Horovod's was a 1.x).
MIN_PL_VERSION = "2.0.0"

LIGHTNING_PARAMS = {
    "input_shapes": (None, "each feature column's shape as the module takes it, the batch leading as -1"),
    "trainer_args": (None, "keyword arguments of Lightning's Trainer, over the Estimator's own"),
    "logger": (None, "Lightning's logger (Trainer's logger)"),
    "log_every_n_steps": (50, "Trainer's log_every_n_steps"),
    "profiler": (None, "Trainer's profiler"),
    # Horovod's Petastorm data module's options: refused unless left unset.
    "data_module": (None, "(Horovod's Petastorm data module; refused: batches come from the Store's Parquet)"),
    "loader_num_epochs": (None, "(Petastorm's reader epochs; refused)"),
    "debug_data_loader": (False, "(Horovod's data loader debugging; refused)"),
    "train_async_data_loader_queue_size": (None, "(Horovod's asynchronous data loader; refused)"),
    "val_async_data_loader_queue_size": (None, "(Horovod's asynchronous data loader; refused)"),
}
# What the LightningModule itself says (training_step's loss, configure_optimizers): set here, they are refused.
MODULE_OWNS = ("optimizer", "loss", "loss_weights", "metrics", "sample_weight_col", "gradient_compression")


class TorchEstimator(EstimatorBase):
    """Fits a LightningModule to a DataFrame with Lightning's Trainer on hvdlite ranks in Spark tasks. Horovod's
    parameters (docs/spark.md); ``setX`` / ``getX`` for each."""

    checkpoint_name = "checkpoint.ckpt"  # Lightning's own checkpoint: the trainer's state with the module's

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        table = {**ESTIMATOR_PARAMS, **LIGHTNING_PARAMS}
        self._setDefault(**{name: default for name, (default, _) in table.items()})
        set_kwargs(self, self._input_kwargs, table)

    @keyword_only
    def setParams(self, **kwargs):
        return set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **LIGHTNING_PARAMS})

    def _fit(self, df):
        self._check_common(needed=("model", "store"),
                           unsupported=(*MODULE_OWNS, "data_module", "loader_num_epochs", "debug_data_loader",
                                        "train_async_data_loader_queue_size", "val_async_data_loader_queue_size"))
        backend = self._backend()
        prepared = self._prepare(df, backend)
        run_id, checkpoint_path, checkpoint = self._run("lightning")
        trainer_args = {"log_every_n_steps": self.getLogEveryNSteps(), **(self.getTrainerArgs() or {})}
        for name in ("logger", "profiler"):
            if self.getOrDefault(getattr(self, name)) is not None:
                trainer_args[name] = self.getOrDefault(getattr(self, name))
        spec = {**self._common_spec(prepared, checkpoint_path), "model": self.getModel(), "checkpoint": checkpoint,
                "trainer_args": trainer_args, "callbacks": self.getCallbacks()}
        history, final = self._train_on_ranks(backend, "hvdlite.spark.lightning.remote", spec)
        model = copy.deepcopy(self.getModel())
        model.load_state_dict(torch.load(io.BytesIO(final), map_location="cpu", weights_only=False))
        model.eval()
        return TorchModel(history=history, model=model, feature_columns=spec["feature_cols"],
                          label_columns=spec["label_cols"], input_shapes=self.getInputShapes(), run_id=run_id)



add_params(TorchEstimator, {**ESTIMATOR_PARAMS, **LIGHTNING_PARAMS})
