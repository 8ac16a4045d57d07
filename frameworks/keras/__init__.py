"""``import hvdlite.keras as hvd``: Keras 3 is one library, so this is ``hvdlite.tensorflow.keras``."""
from hvdlite.tensorflow.keras import *  # noqa: F401,F403
from hvdlite.tensorflow.keras import (DistributedOptimizer, PartialDistributedOptimizer,  # noqa: F401
                                      SyncBatchNormalization, allgather, allgather_object, allreduce,
                                      broadcast, broadcast_object, broadcast_variables, callbacks, load_model,
                                      reducescatter)
