"""What every framework's Estimator and Model do alike on the driver: parameters set by keyword, the backend that
runs the ranks, the fit's data written to (or found in) the Store, the run's name and the state it resumes from, and
``transform``'s prediction columns computed in the executors by a pandas UDF over Arrow batches. A framework's
Estimator adds how a model is packed for the ranks and trained there (hvdlite/spark/<framework>/remote.py); its
Model, how a batch of feature arrays becomes predictions."""
import importlib
import time
import typing

import cloudpickle
import numpy as np
from pyspark.ml import Estimator, Model
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hvdlite.spark.common import data
from hvdlite.spark.common.backend import SparkBackend
from hvdlite.spark.common.params import camel, check_refused
from hvdlite.spark.common.persistence import Persistent

# A Model's parameters, whatever its framework.
MODEL_PARAMS = {
    "history": (None, "the metrics of each epoch"),
    "model": (None, "the trained model"),
    "feature_columns": (None, "the feature columns"),
    "label_columns": (None, "the label columns"),
    "output_cols": (None, "the prediction columns transform adds; default: <label>__output"),
    "run_id": (None, "the run's name in the Store"),
}


def set_kwargs(instance, kwargs, table):
    """Sets keyword parameters; a name not in table is a TypeError naming it."""
    unknown = sorted(set(kwargs) - set(table))
    if unknown:
        raise TypeError(f"{type(instance).__name__} has no parameter {', '.join(unknown)}")
    instance._set(**kwargs)
    return instance


class EstimatorBase(Persistent, Estimator):
    """The driver's part of fit that does not depend on the framework."""

    # The checkpoint's file name in the run's folder (None: the Store's, checkpoint.pt).
    checkpoint_name = None

    def _checkpoint_name(self):
        return self.checkpoint_name or self.getStore().get_checkpoint_filename()

    def _backend(self):
        backend, num_proc = self.getBackend(), self.getNumProc()
        if backend is not None and num_proc is not None:
            raise ValueError("set num_proc or backend, not both")
        return backend or SparkBackend(num_proc=num_proc, verbose=self.getVerbose())

    def _check_common(self, needed, unsupported=()):
        """Refused parameters, parameters this framework cannot honour and ones it needs, input_shapes' length."""
        check_refused(self)
        for name in unsupported:
            if self.getOrDefault(getattr(self, name)):
                raise ValueError(f"{type(self).__name__} cannot honour {name}: leave it unset (docs/spark.md)")
        for name in needed:
            if self.getOrDefault(getattr(self, name)) is None:
                raise ValueError(f"{type(self).__name__} needs {name} (set{camel(name)})")
        shapes, features = self.getInputShapes(), self.getFeatureCols() or []
        if shapes is not None and len(shapes) != len(features):
            raise ValueError(f"input_shapes has {len(shapes)} shapes for {len(features)} feature columns")

    def _prepare(self, df, backend):
        """The fit's Parquet in the Store (written, or found from an earlier fit of the same data)."""
        feature_cols, label_cols = list(self.getFeatureCols() or []), list(self.getLabelCols() or [])
        shapes = dict(zip(feature_cols, self.getInputShapes() or []))
        shapes.update(dict(zip(label_cols, self.getLabelShapes() or [])))
        return data.prepare(df, self.getStore(), feature_cols, label_cols, self.getSampleWeightCol(),
                            self.getValidation(), self.getRandomSeed(),
                            backend.num_processes() * self.getPartitionsPerProcess(), shapes, self.getVerbose())

    def _run(self, prefix):
        """(run_id, checkpoint folder, the checkpoint's bytes where the run has one: it resumes from there)."""
        store = self.getStore()
        run_id = self.getRunId() or f"{prefix}_{int(time.time())}"
        checkpoint_path = store.get_checkpoint_path(run_id)
        checkpoint_file = f"{checkpoint_path}/{self._checkpoint_name()}"
        if not store.exists(checkpoint_file):
            return run_id, checkpoint_path, None
        if self.getVerbose():
            print(f"hvdlite: resuming run {run_id} from {checkpoint_file}")
        return run_id, checkpoint_path, store.read(checkpoint_file)

    def _train_on_ranks(self, backend, remote_module, spec):
        """Rank 0's return value of remote_module's train(spec) run on every rank of backend."""
        return backend.run(_train_remote, args=(remote_module, cloudpickle.dumps(spec)))[0]

    def _common_spec(self, prepared, checkpoint_path):
        """What every framework's ranks are given, besides the model and its training."""
        store = self.getStore()
        return {"feature_cols": list(self.getFeatureCols()), "label_cols": list(self.getLabelCols()),
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
                "terminate_on_nan": self.getTerminateOnNan(), "inmemory_cache_all": self.getInmemoryCacheAll(),
                "checkpoint_path": checkpoint_path,
                "checkpoint_name": self._checkpoint_name()}


def _train_remote(remote_module, spec_bytes):
    """On a rank: remote_module's train(spec). The spec crosses as bytes, read once the framework is imported."""
    return importlib.import_module(remote_module).train(cloudpickle.loads(spec_bytes))


class ModelBase(Persistent, Model):
    """transform: one prediction column per label column (setOutputCols), computed in the executors. A framework's
    Model gives _predict_fn(): a picklable function from a batch's feature arrays (one numpy array per feature
    column, rows first, shaped as input_shapes say) to a list of output arrays, rows first."""

    def _outputs(self):
        return list(self.getOutputCols() or [f"{name}__output" for name in self.getLabelColumns()])

    def _transform(self, df):
        features, outputs = list(self.getFeatureColumns()), self._outputs()
        for name in features:
            data.column_kind(df, name)
        staged = [vector_to_array(F.col(name), "float32") if isinstance(df.schema[name].dataType, VectorUDT)
                  else F.col(name) for name in features]
        predict_fn = self._predict_fn()
        sizes = output_sizes(predict_fn, df.select(*staged).first())
        if len(sizes) != len(outputs):
            raise ValueError(f"the model gives {len(sizes)} outputs for the output columns {outputs}")
        types = [T.DoubleType() if size == 1 else T.ArrayType(T.DoubleType()) for size in sizes]
        predict = F.pandas_udf(predictor(cloudpickle.dumps(predict_fn), outputs, sizes, len(features)),
                               T.StructType([T.StructField(n, t) for n, t in zip(outputs, types)]))
        packed = "__hvdlite_predictions"
        return df.withColumn(packed, predict(*staged)).select(
            *[F.col(f"`{name}`") for name in df.columns],
            *[F.col(f"{packed}.`{name}`").alias(name) for name in outputs])


def predictor(packed_fn, outputs, sizes, feature_count):
    """The pandas UDF's function: the predict function loaded once per task, then Arrow batches of the features in,
    a DataFrame of the predictions out (only the feature columns cross to Python)."""
    import pandas as pd

    def predict(batches):
        predict_fn = cloudpickle.loads(packed_fn)
        for batch in batches:
            columns = batch if isinstance(batch, tuple) else (batch,)
            results = predict_fn([feature_array(column.to_numpy()) for column in columns])
            frame = {}
            for name, size, result in zip(outputs, sizes, results):
                values = np.asarray(result, dtype=np.float64).reshape(len(columns[0]), -1)
                frame[name] = values[:, 0] if size == 1 else list(values)
            yield pd.DataFrame(frame)

    argument = typing.Iterator[typing.Tuple[(pd.Series,) * feature_count]] if feature_count > 1 \
        else typing.Iterator[pd.Series]
    predict.__annotations__ = {"batches": argument, "return": typing.Iterator[pd.DataFrame]}
    return predict


def feature_array(values):
    """A column's values for a batch (a numpy object array of lists, or of numbers) as one array, rows first."""
    return np.ascontiguousarray(np.stack(values) if values.dtype == object else values)


def output_sizes(predict_fn, row):
    """The number of values each output has for one row, from a prediction on the driver."""
    columns = []
    for value in row:
        column = np.empty(1, dtype=object if isinstance(value, (list, tuple)) else None)
        column[0] = value
        columns.append(feature_array(column))
    return [int(np.prod(np.shape(r)[1:])) if np.ndim(r) > 1 else 1 for r in predict_fn(columns)]
