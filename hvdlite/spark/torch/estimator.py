"""horovod.spark.torch's TorchEstimator and TorchModel on hvdlite: ``TorchEstimator(...).fit(df)`` writes the
DataFrame's columns to Parquet in the Store, trains on ``num_proc`` ranks in Spark tasks (hvdlite/spark/torch/
remote.py), and returns a TorchModel whose ``transform(df)`` adds the model's predictions as columns."""
import copy
import io
import time

import cloudpickle
import numpy as np
import torch
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hvdlite.spark.common import data
from hvdlite.spark.common.backend import SparkBackend
from hvdlite.spark.common.params import ESTIMATOR_PARAMS, add_params, camel, check_refused
from hvdlite.spark.common.persistence import Persistent
from hvdlite.spark.torch import remote

TORCH_PARAMS = {
    "input_shapes": (None, "each feature column's shape as the model takes it, the batch leading as -1"),
    "loss_constructors": (None, "functions that each make a loss (instead of loss)"),
    "train_minibatch_fn": (None, "(Horovod's custom training step; refused: not supported)"),
}
MODEL_PARAMS = {
    "history": (None, "the metrics of each epoch"),
    "model": (None, "the trained model"),
    "optimizer": (None, "the optimizer, with its state after training"),
    "feature_columns": (None, "the feature columns"),
    "label_columns": (None, "the label columns"),
    "input_shapes": (None, "each feature column's shape as the model takes it"),
    "output_cols": (None, "the prediction columns transform adds; default: <label>__output"),
    "run_id": (None, "the run's name in the Store"),
    "loss": (None, "the loss"),
    "loss_constructors": (None, "the loss constructors"),
}


def _set_kwargs(instance, kwargs, table):
    unknown = sorted(set(kwargs) - set(table))
    if unknown:
        raise TypeError(f"{type(instance).__name__} has no parameter {', '.join(unknown)}")
    instance._set(**kwargs)
    return instance


class TorchEstimator(Persistent, Estimator):
    """Fits a PyTorch model to a DataFrame on hvdlite ranks in Spark tasks. Horovod's parameters (docs/spark.md);
    ``setX`` / ``getX`` for each."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in {**ESTIMATOR_PARAMS, **TORCH_PARAMS}.items()})
        _set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})

    @keyword_only
    def setParams(self, **kwargs):
        return _set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})

    # ---------------------------------------------------------------------------------------- checks
    def _losses(self, label_count):
        loss, constructors = self.getLoss(), self.getLossConstructors()
        if (loss is None) == (constructors is None):
            raise ValueError("set exactly one of loss and loss_constructors")
        made = [c() for c in constructors] if constructors is not None else (
            list(loss) if isinstance(loss, (list, tuple)) else [loss] * label_count)
        if len(made) != label_count:
            raise ValueError(f"{len(made)} losses for {label_count} label columns")
        return made

    def _backend(self):
        backend, num_proc = self.getBackend(), self.getNumProc()
        if backend is not None and num_proc is not None:
            raise ValueError("set num_proc or backend, not both")
        return backend or SparkBackend(num_proc=num_proc, verbose=self.getVerbose())

    def _check(self):
        check_refused(self)
        for name in ("train_minibatch_fn", "callbacks"):
            if self.getOrDefault(getattr(self, name)):
                raise ValueError(f"TorchEstimator cannot honour {name}: leave it unset (docs/spark.md)")
        for name in ("model", "optimizer", "store"):
            if self.getOrDefault(getattr(self, name)) is None:
                raise ValueError(f"TorchEstimator needs {name} (set{camel(name)})")
        shapes = self.getInputShapes()
        if shapes is not None and len(shapes) != len(self.getFeatureCols() or []):
            raise ValueError(f"input_shapes has {len(shapes)} shapes for {len(self.getFeatureCols() or [])} "
                             "feature columns")

    # ---------------------------------------------------------------------------------------- fit
    def _fit(self, df):
        self._check()
        feature_cols, label_cols = list(self.getFeatureCols() or []), list(self.getLabelCols() or [])
        losses = self._losses(len(label_cols))
        store, backend = self.getStore(), self._backend()
        shapes = dict(zip(feature_cols, self.getInputShapes() or []))
        shapes.update(dict(zip(label_cols, self.getLabelShapes() or [])))
        prepared = data.prepare(df, store, feature_cols, label_cols, self.getSampleWeightCol(), self.getValidation(),
                                self.getRandomSeed(), backend.num_processes() * self.getPartitionsPerProcess(),
                                shapes, self.getVerbose())
        run_id = self.getRunId() or f"pytorch_{int(time.time())}"
        checkpoint_path = store.get_checkpoint_path(run_id)
        checkpoint_file = f"{checkpoint_path}/{store.get_checkpoint_filename()}"
        if store.exists(checkpoint_file):
            if self.getVerbose():
                print(f"hvdlite: resuming run {run_id} from {checkpoint_file}")
            state = store.read(checkpoint_file)
        else:
            buffer = io.BytesIO()
            torch.save({"model": self.getModel().state_dict(), "optimizer": self.getOptimizer().state_dict()}, buffer)
            state = buffer.getvalue()
        spec = {"model": self.getModel(), "optimizer_cls": type(self.getOptimizer()), "state": state,
                "losses": losses, "loss_weights": list(self.getLossWeights() or [1.0] * len(label_cols)),
                "metrics": list(self.getMetrics() or []), "feature_cols": feature_cols, "label_cols": label_cols,
                "sample_weight_col": self.getSampleWeightCol(), "input_shapes": self.getInputShapes(),
                "metadata": prepared.metadata, "store": store, "train_path": prepared.train_path,
                "val_path": prepared.val_path, "batch_size": self.getBatchSize(),
                "val_batch_size": self.getValBatchSize() or self.getBatchSize(), "epochs": self.getEpochs(),
                "train_steps_per_epoch": self.getTrainStepsPerEpoch(),
                "validation_steps_per_epoch": self.getValidationStepsPerEpoch(),
                "transformation_fn": self.getTransformationFn(),
                "backward_passes_per_step": self.getBackwardPassesPerStep(),
                "gradient_compression": self.getGradientCompression(), "shuffle": self.getShuffle(),
                "random_seed": self.getRandomSeed(), "use_gpu": self.getUseGpu(), "verbose": self.getVerbose(),
                "terminate_on_nan": self.getTerminateOnNan(), "checkpoint_path": checkpoint_path,
                "checkpoint_name": store.get_checkpoint_filename()}
        history, final = backend.run(_train_from_bytes, args=(cloudpickle.dumps(spec),))[0]
        trained = torch.load(io.BytesIO(final), map_location="cpu", weights_only=False)
        model, optimizer = copy.deepcopy(self.getModel()), copy.deepcopy(self.getOptimizer())
        model.load_state_dict(trained["model"])
        model.eval()
        optimizer.load_state_dict(trained["optimizer"])
        return TorchModel(history=history, model=model, optimizer=optimizer, feature_columns=feature_cols,
                          label_columns=label_cols, input_shapes=self.getInputShapes(), run_id=run_id,
                          loss=self.getLoss(), loss_constructors=self.getLossConstructors())


def _train_from_bytes(spec_bytes):
    return remote.train(cloudpickle.loads(spec_bytes))


class TorchModel(Persistent, Model):
    """A trained PyTorch model as a Spark ML Transformer: ``transform(df)`` adds one prediction column per label
    column (``setOutputCols``), computed in the executors in Arrow batches. ``getModel()`` is the torch module,
    ``getHistory()`` its metrics by epoch."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in MODEL_PARAMS.items()})
        _set_kwargs(self, self._input_kwargs, MODEL_PARAMS)

    def _outputs(self):
        return list(self.getOutputCols() or [f"{name}__output" for name in self.getLabelColumns()])

    def _transform(self, df):
        features, outputs = list(self.getFeatureColumns()), self._outputs()
        for name in features:
            data.column_kind(df, name)
        staged = [F.col(name) for name in features]
        staged = [vector_to_array(column, "float32") if isinstance(df.schema[name].dataType, VectorUDT) else column
                  for name, column in zip(features, staged)]
        model, shapes = self.getModel(), self.getInputShapes()
        sizes = _output_sizes(model, df.select(*staged).first(), shapes)
        if len(sizes) != len(outputs):
            raise ValueError(f"the model gives {len(sizes)} outputs for the output columns {outputs}")
        types = [T.DoubleType() if size == 1 else T.ArrayType(T.DoubleType()) for size in sizes]
        predict = F.pandas_udf(_predictor(cloudpickle.dumps(model), shapes, outputs, sizes, len(features)),
                               T.StructType([T.StructField(n, t) for n, t in zip(outputs, types)]))
        packed = "__hvdlite_predictions"
        return df.withColumn(packed, predict(*staged)).select(
            *[F.col(f"`{name}`") for name in df.columns], *[F.col(f"{packed}.`{name}`").alias(name) for name in outputs])


def _predictor(packed, shapes, outputs, sizes, feature_count):
    """The pandas UDF's function: the model loaded once per task, then Arrow batches of the features in, a
    DataFrame of the predictions out (only the feature columns cross to Python)."""
    import typing

    import pandas as pd

    def predict(batches):
        net = cloudpickle.loads(packed)
        net.eval()
        for batch in batches:
            columns = batch if isinstance(batch, tuple) else (batch,)
            with torch.no_grad():
                results = net(*_inputs([column.to_numpy() for column in columns], shapes))
            results = list(results) if isinstance(results, (tuple, list)) else [results]
            frame = {}
            for name, size, result in zip(outputs, sizes, results):
                values = result.detach().cpu().double().numpy().reshape(len(columns[0]), -1)
                frame[name] = values[:, 0] if size == 1 else list(values)
            yield pd.DataFrame(frame)

    argument = typing.Iterator[typing.Tuple[(pd.Series,) * feature_count]] if feature_count > 1 \
        else typing.Iterator[pd.Series]
    predict.__annotations__ = {"batches": argument, "return": typing.Iterator[pd.DataFrame]}
    return predict


def _inputs(columns, shapes):
    """Feature values of a batch (numpy object arrays of lists, or numbers) as the model's tensors."""
    tensors = []
    for i, values in enumerate(columns):
        array = np.stack(values) if values.dtype == object else values
        tensor = torch.as_tensor(np.ascontiguousarray(array))
        tensor = tensor.float() if tensor.is_floating_point() else tensor
        tensors.append(tensor.reshape(shapes[i]) if shapes else tensor)
    return tensors


def _output_sizes(model, row, shapes):
    """The number of values each output has for one row, from a forward pass on the driver."""
    columns = []
    for value in row:
        column = np.empty(1, dtype=object if isinstance(value, (list, tuple)) else None)
        column[0] = value
        columns.append(column)
    model.eval()
    with torch.no_grad():
        results = model(*_inputs(columns, shapes))
    results = list(results) if isinstance(results, (tuple, list)) else [results]
    return [int(np.prod(r.shape[1:])) if r.dim() > 1 else 1 for r in results]


add_params(TorchEstimator, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})
add_params(TorchModel, MODEL_PARAMS)
