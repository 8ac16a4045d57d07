"""horovod.spark.keras's KerasEstimator and KerasModel on hvdlite, for Keras 3: ``KerasEstimator(...).fit(df)``
writes the DataFrame's columns to Parquet in the Store, trains with ``model.fit`` on ``num_proc`` ranks in Spark
tasks (hvdlite/spark/keras/remote.py), and returns a KerasModel whose ``transform(df)`` adds the model's predictions
as columns."""
import pickle

from pyspark import keyword_only

from hvdlite.spark.common.estimator import MODEL_PARAMS, EstimatorBase, ModelBase, set_kwargs
from hvdlite.spark.common.params import ESTIMATOR_PARAMS, add_params
from hvdlite.spark.keras import packing, remote

KERAS_PARAMS = {
    "custom_objects": (None, "the model's custom layers, losses and metrics by name (as Keras' load_model takes "
                             "them)"),
    "input_shapes": (None, "each feature column's shape as the model takes it, the batch leading as -1; default: "
                           "the model's input shapes"),
    "checkpoint_callback": (None, "(Horovod's ModelCheckpoint; refused: the Store keeps a checkpoint each epoch, "
                                  "which run_id resumes from)"),
}
KERAS_MODEL_PARAMS = {
    **MODEL_PARAMS,
    "custom_objects": (None, "the model's custom objects"),
    "input_shapes": (None, "each feature column's shape as the model takes it"),
}


class KerasEstimator(EstimatorBase):
    """Fits a Keras 3 model to a DataFrame on hvdlite ranks in Spark tasks. Horovod's parameters (docs/spark.md);
    ``setX`` / ``getX`` for each."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in {**ESTIMATOR_PARAMS, **KERAS_PARAMS}.items()})
        set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **KERAS_PARAMS})

    @keyword_only
    def setParams(self, **kwargs):
        return set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **KERAS_PARAMS})

    def _fit(self, df):
        self._check_common(needed=("model", "optimizer", "loss", "store"), unsupported=("checkpoint_callback",))
        label_cols = list(self.getLabelCols() or [])
        loss = self.getLoss()
        if isinstance(loss, (list, tuple)) and len(loss) != len(label_cols):
            raise ValueError(f"{len(loss)} losses for {len(label_cols)} label columns")
        custom_objects = self.getCustomObjects()
        model_bytes = packing.model_to_bytes(self.getModel())
        backend = self._backend()
        prepared = self._prepare(df, backend)
        run_id, checkpoint_path, state = self._run("keras")
        spec = {**self._common_spec(prepared, checkpoint_path), "model": model_bytes,
                "optimizer": packing.optimizer_config(self.getOptimizer()), "state": state,
                "custom_objects": custom_objects, "loss": loss, "loss_weights": self.getLossWeights(),
                "metrics": self.getMetrics(), "callbacks": self.getCallbacks()}
        history, final = self._train_on_ranks(backend, "hvdlite.spark.keras.remote", spec)
        model = packing.model_from_bytes(model_bytes, custom_objects)
        model.set_weights(pickle.loads(final)["weights"])
        return KerasModel(history=history, model=model, feature_columns=spec["feature_cols"],
                          label_columns=label_cols, custom_objects=custom_objects,
                          input_shapes=self.getInputShapes(), run_id=run_id)



class KerasModel(ModelBase):
    """A trained Keras model as a Spark ML Transformer: ``transform(df)`` adds one prediction column per label
    column (``setOutputCols``), computed in the executors in Arrow batches. ``getModel()`` is the Keras model,
    ``getHistory()`` its metrics by epoch."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in KERAS_MODEL_PARAMS.items()})
        set_kwargs(self, self._input_kwargs, KERAS_MODEL_PARAMS)

    def _predict_fn(self):
        return _Predict(packing.model_to_bytes(self.getModel()), self.getCustomObjects(), self.getInputShapes())


class _Predict:
    """The model, loaded once where it runs, applied to a batch's feature arrays (shaped as its inputs)."""

    def __init__(self, model_bytes, custom_objects, shapes):
        self.model_bytes, self.custom_objects, self.shapes = model_bytes, custom_objects, shapes
        self.model = None

    def __getstate__(self):
        return {**self.__dict__, "model": None}

    def __call__(self, arrays):
        if self.model is None:
            self.model = packing.model_from_bytes(self.model_bytes, self.custom_objects)
        shapes = self.shapes or [remote.input_shape(self.model, i) for i in range(len(arrays))]
        inputs = [remote.shaped(array, shape) for array, shape in zip(arrays, shapes)]
        results = self.model(inputs[0] if len(inputs) == 1 else inputs, training=False)
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        return [r.numpy() if hasattr(r, "numpy") else r for r in results]


add_params(KerasEstimator, {**ESTIMATOR_PARAMS, **KERAS_PARAMS})
add_params(KerasModel, KERAS_MODEL_PARAMS)
