"""horovod.spark.keras on hvdlite: KerasEstimator and KerasModel, for Keras 3 (docs/spark.md)."""
from .estimator import KerasEstimator, KerasModel  # noqa: F401
