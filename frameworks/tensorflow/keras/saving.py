"""load_model: keras.models.load_model, with the loaded optimizer made distributed."""
import keras

from ..compression import Compression
from .optimizer import wrap_in_place


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               **distributed_optimizer_kwargs):
    """Loads a saved Keras model and wraps its optimizer (with its saved state) in a DistributedOptimizer.

    ``custom_optimizers`` lists optimizer classes that are not Keras' own; ``custom_objects`` is passed to
    Keras; ``compression`` and the other keyword arguments are DistributedOptimizer's.
    """
    objects = {cls.__name__: cls for cls in (custom_optimizers or [])}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        wrap_in_place(optimizer, compression=compression, **distributed_optimizer_kwargs)
    return model
