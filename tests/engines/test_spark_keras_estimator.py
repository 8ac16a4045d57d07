"""hvdlite.spark.keras's KerasEstimator on a real PySpark (local[2]) and Keras 3, on scikit-learn's digits as a
DataFrame: fit trains on 2 ranks in Spark tasks from Parquet in a LocalStore to the accuracy of the same model trained
in one process on the same rows (within TOLERANCE), transform's predictions are the trained model's applied in this
process, sparse vector columns and sample weights train, the Model saves and loads inside a Pipeline, a bad column or
a refused parameter is an error naming it before any rank starts, and a rank that fails ends fit with its error, the
run then resuming from the Store's checkpoint."""
import os
import sys

import cloudpickle
import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402

import hvdlite.spark  # noqa: E402
from estimator_cases import (BATCH, EPOCHS, LR, SEED, TOLERANCE, by_id,  # noqa: E402
                             fails_then_resumes, prepared_paths, rows)
from hvdlite.spark.common.store import Store  # noqa: E402
from hvdlite.spark.keras import KerasEstimator, KerasModel  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.long
ENV = {"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTEROP_THREADS": "1",
       "TF_NUM_INTRAOP_THREADS": "1"}


def fresh_model():
    keras.utils.set_random_seed(SEED)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])


def loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def estimator(store, **changes):
    settings = dict(backend=hvdlite.spark.common.backend.SparkBackend(num_proc=2, env=ENV), model=fresh_model(),
                    optimizer=keras.optimizers.SGD(LR), loss=loss(), metrics=["accuracy"], store=store,
                    feature_cols=["features"], label_cols=["label"], validation="is_val", batch_size=BATCH,
                    epochs=EPOCHS, random_seed=SEED, verbose=0)
    settings.update(changes)
    return KerasEstimator(**settings)


def single_process_accuracy(store, train_path, val_path):
    """The same model trained in this process on the fit's training rows (batches of BATCH x 2, as 2 ranks of
    BATCH average), scored on its validation rows."""
    x, y = rows(store, train_path)
    model = fresh_model()
    model.compile(optimizer=keras.optimizers.SGD(LR), loss=loss(), metrics=["accuracy"])
    steps = len(y) // (2 * BATCH)
    rng = np.random.default_rng(SEED)
    for _ in range(EPOCHS):
        order = rng.permutation(len(y))[:steps * 2 * BATCH]
        model.fit(x[order], y[order], batch_size=2 * BATCH, epochs=1, shuffle=False, verbose=0)
    vx, vy = rows(store, val_path)
    return float(model.evaluate(vx, vy, verbose=0, return_dict=True)["accuracy"])


def features(digits):
    return np.array([r.features.toArray() for r in sorted(digits.select("id", "features").collect())], np.float32)


def test_fit_trains_to_the_single_process_accuracy_and_transform_predicts_as_the_model(spark, digits, tmp_path,
                                                                                       job_token):
    store = Store.create(str(tmp_path / "store"))
    trained = estimator(store).fit(digits)
    history = trained.getHistory()
    assert len(history["loss"]) == EPOCHS and history["loss"][-1] < history["loss"][0], history
    alone = single_process_accuracy(store, *prepared_paths(store))
    assert alone > 0.85, alone
    print(f"validation accuracy: 2 ranks {history['val_accuracy'][-1]:.4f}, one process {alone:.4f}")
    assert abs(history["val_accuracy"][-1] - alone) <= TOLERANCE, (history["val_accuracy"], alone)

    got = by_id(trained.transform(digits), "label__output")
    expected = np.asarray(trained.getModel()(features(digits), training=False), np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    labels = np.array([r.label for r in sorted(digits.select("id", "label").collect())])
    val = np.array([r.is_val for r in sorted(digits.select("id", "is_val").collect())])
    assert abs((got[val].argmax(axis=1) == labels[val]).mean() - history["val_accuracy"][-1]) < 1e-6, history


@pytest.mark.check_long  # make check trains each Estimator once (the test above); further fits: make check-long
def test_sparse_vector_columns_and_sample_weights_train_and_the_model_saves_in_a_pipeline(spark, digits, tmp_path,
                                                                                         job_token):
    store = Store.create(str(tmp_path / "store"))
    pipeline_model = Pipeline(stages=[estimator(store, feature_cols=["features_sparse"], sample_weight_col="weight",
                                                epochs=3, validation=0.2)]).fit(digits)
    assert pipeline_model.stages[0].getHistory()["val_accuracy"][-1] > 0.8, pipeline_model.stages[0].getHistory()
    pipeline_model.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[0], KerasModel)
    np.testing.assert_array_equal(by_id(loaded.transform(digits), "label__output"),
                                  by_id(pipeline_model.transform(digits), "label__output"))
    assert loaded.stages[0].getHistory() == pipeline_model.stages[0].getHistory()


def test_a_bad_column_or_a_refused_parameter_is_an_error_naming_it_before_any_rank_starts(spark, digits, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="column 'featurez' is not in the DataFrame"):
        estimator(store, feature_cols=["featurez"]).fit(digits)
    with pytest.raises(ValueError, match="cannot honour checkpoint_callback"):
        estimator(store, checkpoint_callback=keras.callbacks.ModelCheckpoint("x.keras")).fit(digits)
    with pytest.raises(ValueError, match="2 losses for 1 label columns"):
        estimator(store, loss=[loss(), loss()]).fit(digits)
    assert not os.path.exists(tmp_path / "store") or not os.listdir(tmp_path / "store"), os.listdir(tmp_path / "store")


@pytest.mark.check_long
def test_a_failing_rank_fails_fit_with_its_error_and_the_run_resumes_from_its_checkpoint(spark, digits, tmp_path,
                                                                                         job_token):
    store = Store.create(str(tmp_path / "store"))
    fails_then_resumes(estimator, store, digits, store.get_checkpoint_filename(), "loss", bound_s=180, env=ENV)
