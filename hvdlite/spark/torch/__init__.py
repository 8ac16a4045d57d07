"""horovod.spark.torch on hvdlite: TorchEstimator and TorchModel (docs/spark.md)."""
from .estimator import TorchEstimator, TorchModel  # noqa: F401
