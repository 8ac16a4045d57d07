"""horovod.spark.lightning on hvdlite: TorchEstimator for a LightningModule, and TorchModel (docs/spark.md)."""
from .estimator import TorchEstimator, TorchModel  # noqa: F401
