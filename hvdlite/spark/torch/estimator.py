"""horovod.spark.torch's TorchEstimator and TorchModel on hvdlite: ``TorchEstimator(...).fit(df)`` writes the
DataFrame's columns to Parquet in the Store, trains on ``num_proc`` ranks in Spark tasks (hvdlite/spark/torch/
remote.py), and returns a TorchModel whose ``transform(df)`` adds the model's predictions as columns."""
import copy
import io

import torch
from pyspark import keyword_only

from hvdlite.spark.common.estimator import MODEL_PARAMS, EstimatorBase, ModelBase, set_kwargs
from hvdlite.spark.common.params import ESTIMATOR_PARAMS, add_params

TORCH_PARAMS = {
    "input_shapes": (None, "each feature column's shape as the model takes it, the batch leading as -1"),
    "loss_constructors": (None, "functions that each make a loss (instead of loss)"),
    "train_minibatch_fn": (None, "(Horovod's custom training step; refused: not supported)"),
}
TORCH_MODEL_PARAMS = {
    **MODEL_PARAMS,
    "optimizer": (None, "the optimizer, with its state after training"),
    "input_shapes": (None, "each feature column's shape as the model takes it"),
    "loss": (None, "the loss"),
    "loss_constructors": (None, "the loss constructors"),
}


class TorchEstimator(EstimatorBase):
    """Fits a PyTorch model to a DataFrame on hvdlite ranks in Spark tasks. Horovod's parameters (docs/spark.md);
    ``setX`` / ``getX`` for each."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in {**ESTIMATOR_PARAMS, **TORCH_PARAMS}.items()})
        set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})

    @keyword_only
    def setParams(self, **kwargs):
        return set_kwargs(self, self._input_kwargs, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})

    def _losses(self, label_count):
        loss, constructors = self.getLoss(), self.getLossConstructors()
        if (loss is None) == (constructors is None):
            raise ValueError("set exactly one of loss and loss_constructors")
        made = [c() for c in constructors] if constructors is not None else (
            list(loss) if isinstance(loss, (list, tuple)) else [loss] * label_count)
        if len(made) != label_count:
            raise ValueError(f"{len(made)} losses for {label_count} label columns")
        return made

    def _fit(self, df):
        self._check_common(needed=("model", "optimizer", "store"), unsupported=("train_minibatch_fn", "callbacks"))
        label_cols = list(self.getLabelCols() or [])
        losses = self._losses(len(label_cols))
        backend = self._backend()
        prepared = self._prepare(df, backend)
        run_id, checkpoint_path, state = self._run("pytorch")
        if state is None:
            buffer = io.BytesIO()
            torch.save({"model": self.getModel().state_dict(), "optimizer": self.getOptimizer().state_dict()}, buffer)
            state = buffer.getvalue()
        spec = {**self._common_spec(prepared, checkpoint_path), "model": self.getModel(),
                "optimizer_cls": type(self.getOptimizer()), "state": state, "losses": losses,
                "loss_weights": list(self.getLossWeights() or [1.0] * len(label_cols)),
                "metrics": list(self.getMetrics() or [])}
        history, final = self._train_on_ranks(backend, "hvdlite.spark.torch.remote", spec)
        trained = torch.load(io.BytesIO(final), map_location="cpu", weights_only=False)
        model, optimizer = copy.deepcopy(self.getModel()), copy.deepcopy(self.getOptimizer())
        model.load_state_dict(trained["model"])
        model.eval()
        optimizer.load_state_dict(trained["optimizer"])
        return TorchModel(history=history, model=model, optimizer=optimizer, feature_columns=spec["feature_cols"],
                          label_columns=label_cols, input_shapes=self.getInputShapes(), run_id=run_id,
                          loss=self.getLoss(), loss_constructors=self.getLossConstructors())



class TorchModel(ModelBase):
    """A trained PyTorch model as a Spark ML Transformer: ``transform(df)`` adds one prediction column per label
    column (``setOutputCols``), computed in the executors in Arrow batches. ``getModel()`` is the torch module,
    ``getHistory()`` its metrics by epoch."""

    @keyword_only
    def __init__(self, **kwargs):
        super().__init__()
        self._setDefault(**{name: default for name, (default, _) in TORCH_MODEL_PARAMS.items()})
        set_kwargs(self, self._input_kwargs, TORCH_MODEL_PARAMS)

    def _predict_fn(self):
        return _Predict(self.getModel(), self.getInputShapes())


class _Predict:
    """The module applied to a batch's feature arrays, in eval mode and without gradients."""

    def __init__(self, model, shapes):
        self.model, self.shapes = model, shapes

    def __call__(self, arrays):
        self.model.eval()
        tensors = []
        for i, array in enumerate(arrays):
            tensor = torch.as_tensor(array)
            tensor = tensor.float() if tensor.is_floating_point() else tensor
            tensors.append(tensor.reshape(self.shapes[i]) if self.shapes else tensor)
        with torch.no_grad():
            results = self.model(*tensors)
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        return [r.detach().cpu().double().numpy() for r in results]


add_params(TorchEstimator, {**ESTIMATOR_PARAMS, **TORCH_PARAMS})
add_params(TorchModel, TORCH_MODEL_PARAMS)
