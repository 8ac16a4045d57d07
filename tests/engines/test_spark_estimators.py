"""hvdlite.spark.torch's TorchEstimator on a real PySpark (local[2]), on scikit-learn's digits as a DataFrame: fit
trains on 2 ranks in Spark tasks from Parquet in a LocalStore to the accuracy of the same model trained in one
process on the same rows (within TOLERANCE), transform's predictions are the trained model's applied in this
process, vector (dense and sparse) and array columns and sample weights train, the Estimator and the Model save and
load on their own and inside a Pipeline, the prepared Parquet is reused, a bad column or a refused parameter is
an error naming it before any rank starts, and a rank that dies fails fit with its error, the run then resuming
from the Store's checkpoint."""
import os
import sys

import cloudpickle
import numpy as np
import pytest
import torch
from pyspark.ml import Pipeline, PipelineModel

import hvdlite.spark
from estimator_cases import (BATCH, EPOCHS, LR, SEED, TOLERANCE, by_id,
                             fails_then_resumes, prepared_paths, torch_accuracy_alone)
from hvdlite.spark.common.store import Store
from hvdlite.spark.torch import TorchEstimator, TorchModel

cloudpickle.register_pickle_by_value(sys.modules[__name__])

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    def forward(self, x):
        return self.layers(x)


def fresh_model():
    torch.manual_seed(SEED)
    return Net()


def accuracy(outputs, labels):
    return (outputs.argmax(dim=1) == labels).float().mean()


def estimator(store, **changes):
    model = fresh_model()
    settings = dict(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                    loss=torch.nn.CrossEntropyLoss(), metrics=[accuracy], store=store, feature_cols=["features"],
                    label_cols=["label"], validation="is_val", batch_size=BATCH, epochs=EPOCHS, random_seed=SEED,
                    verbose=0)
    settings.update(changes)
    return TorchEstimator(**settings)


def single_process_accuracy(store, train_path, val_path):
    """The same model trained in this process on the fit's training rows."""
    model = fresh_model()
    return torch_accuracy_alone(model, torch.optim.SGD(model.parameters(), lr=LR), store, train_path, val_path)


@pytest.mark.long
def test_fit_trains_to_the_single_process_accuracy_and_transform_predicts_as_the_model(spark, digits, tmp_path,
                                                                                       job_token):
    store = Store.create(str(tmp_path / "store"))
    trained = estimator(store).fit(digits)
    history = trained.getHistory()
    assert len(history["loss"]) == EPOCHS and history["loss"][-1] < history["loss"][0], history
    train_path, val_path = prepared_paths(store)
    alone = single_process_accuracy(store, train_path, val_path)
    assert alone > 0.85, alone
    print(f"validation accuracy: 2 ranks {history['val_accuracy'][-1]:.4f}, one process {alone:.4f}")
    assert abs(history["val_accuracy"][-1] - alone) <= TOLERANCE, (history["val_accuracy"], alone)

    out = trained.transform(digits)
    assert set(digits.columns) < set(out.columns) and "label__output" in out.columns
    got = by_id(out, "label__output")
    x = np.array([r.features.toArray() for r in sorted(digits.select("id", "features").collect())], np.float32)
    with torch.no_grad():
        expected = trained.getModel()(torch.as_tensor(x)).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    labels = np.array([r.label for r in sorted(digits.select("id", "label").collect())])
    val = np.array([r.is_val for r in sorted(digits.select("id", "is_val").collect())])
    transform_accuracy = (got[val].argmax(axis=1) == labels[val]).mean()
    assert abs(transform_accuracy - history["val_accuracy"][-1]) < 1e-6, (transform_accuracy, history)

    # The same data and settings again: the Parquet written the first time is read again, not rewritten.
    written = os.path.getmtime(os.path.join(train_path, "hvdlite_metadata.json"))
    estimator(store, epochs=1).fit(digits)
    assert os.path.getmtime(os.path.join(train_path, "hvdlite_metadata.json")) == written


@pytest.mark.parametrize("column", [pytest.param("features_array", marks=pytest.mark.long), "features_sparse"])
def test_array_and_sparse_vector_columns_and_sample_weights_train(spark, digits, tmp_path, column, job_token):
    store = Store.create(str(tmp_path / "store"))
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    trained = estimator(store, feature_cols=[column], sample_weight_col="weight", loss=loss, epochs=3,
                        validation=0.2, input_shapes=[[-1, 64]]).fit(digits)
    assert trained.getHistory()["val_accuracy"][-1] > 0.8, trained.getHistory()
    trained.setOutputCols(["scores"])
    assert by_id(trained.transform(digits), "scores").shape == (1797, 10)


@pytest.mark.long
def test_model_and_estimator_save_and_load_alone_and_in_a_pipeline(spark, digits, tmp_path, job_token):
    store = Store.create(str(tmp_path / "store"))
    pipeline_model = Pipeline(stages=[estimator(store, epochs=2)]).fit(digits)
    pipeline_model.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[0], TorchModel)
    np.testing.assert_array_equal(by_id(loaded.transform(digits), "label__output"),
                                  by_id(pipeline_model.transform(digits), "label__output"))
    assert loaded.stages[0].getHistory() == pipeline_model.stages[0].getHistory()

    original = estimator(store, epochs=3, batch_size=16)
    original.save(str(tmp_path / "estimator"))
    again = TorchEstimator.load(str(tmp_path / "estimator"))
    assert (again.getEpochs(), again.getBatchSize(), again.getFeatureCols()) == (3, 16, ["features"])
    assert again.getStore() is None  # a store belongs to the cluster, as in Horovod: set it again
    for a, b in zip(again.getModel().state_dict().values(), original.getModel().state_dict().values()):
        assert torch.equal(a, b)


def test_a_bad_column_or_a_refused_parameter_is_an_error_naming_it_before_any_rank_starts(spark, digits, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="column 'featurez' is not in the DataFrame"):
        estimator(store, feature_cols=["featurez"]).fit(digits)
    with pytest.raises(ValueError, match="column 'features_array' holds values of|cannot take the shape"):
        estimator(store, feature_cols=["features_array"], input_shapes=[[-1, 65]]).fit(digits)
    with pytest.raises(ValueError, match=r"cannot honour .*train_reader_num_workers=4"):
        estimator(store, train_reader_num_workers=4).fit(digits)
    with pytest.raises(ValueError, match="set num_proc or backend, not both"):
        estimator(store, backend=hvdlite.spark.common.backend.SparkBackend(num_proc=2)).fit(digits)
    # Nothing was written and no rank ran.
    assert not os.path.exists(tmp_path / "store") or not os.listdir(tmp_path / "store"), os.listdir(tmp_path / "store")


@pytest.mark.long
def test_a_failing_rank_fails_fit_with_its_error_and_the_run_resumes_from_its_checkpoint(spark, digits, tmp_path,
                                                                                         job_token):
    store = Store.create(str(tmp_path / "store"))
    fails_then_resumes(estimator, store, digits, store.get_checkpoint_filename(), "loss", bound_s=120)

