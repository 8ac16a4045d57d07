"""Keras models and optimizers as bytes, to cross from the driver to the ranks and executors and back: a model as
its .keras file (architecture and weights), an optimizer as its configuration (its state travels in checkpoints)."""
import os
import tempfile


def model_to_bytes(model):
    import keras
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        keras.saving.save_model(model, path, include_optimizer=False)
        with open(path, "rb") as stream:
            return stream.read()


def model_from_bytes(packed, custom_objects=None):
    import keras
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        with open(path, "wb") as stream:
            stream.write(packed)
        return keras.saving.load_model(path, custom_objects=custom_objects, compile=False)


def optimizer_config(optimizer):
    import keras
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"KerasEstimator takes a Keras 3 optimizer (keras.optimizers.Optimizer); got "
                        f"{type(optimizer).__name__}")
    return keras.optimizers.serialize(optimizer)


def optimizer_from_config(config, custom_objects=None):
    import keras
    return keras.optimizers.deserialize(config, custom_objects=custom_objects)
