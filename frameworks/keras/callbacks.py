"""``hvdlite.keras.callbacks``: the callbacks of ``hvdlite.tensorflow.keras.callbacks``."""
from hvdlite.tensorflow.keras.callbacks import (BroadcastGlobalVariablesCallback,  # noqa: F401
                                                LearningRateScheduleCallback, LearningRateWarmupCallback,
                                                MetricAverageCallback)
