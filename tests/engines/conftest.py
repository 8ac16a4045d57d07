"""The engine tests' fixtures: a variable the ranks inherit (from the launcher on the driver), to find any left
behind; one local[2] Spark for the Spark tests of a run and scikit-learn's digits as a DataFrame for the Estimators'
tests; and one line at the end of a run with the time the engine tests took (they start real JVMs and Ray clusters:
their share of the CI budget is watched)."""
import uuid

import numpy as np
import pytest

from hvdlite.runner.job import processes_with_environment

_spent = {"tests": 0, "seconds": 0.0}


@pytest.fixture
def job_token(monkeypatch):
    token = uuid.uuid4().hex
    monkeypatch.setenv("HVDLITE_TEST_TOKEN", token)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield token
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark for every engine test of a run (its JVM takes seconds to start)."""
    import pyspark.sql
    session = (pyspark.sql.SparkSession.builder.master("local[2]").appName("hvdlite-engine-tests")
               .config("spark.ui.enabled", "false").config("spark.executorEnv.OMP_NUM_THREADS", "1")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def digits(spark):
    """The digits with an id, the features as a dense vector, an array and a sparse vector, the label, a sample
    weight and a validation flag."""
    from pyspark.ml.linalg import Vectors
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float64)
    rows = [(i, Vectors.dense(x[i]), x[i].tolist(), Vectors.sparse(64, {j: float(v) for j, v in enumerate(x[i]) if v}),
             int(y[i]), float(1 + y[i] % 2), bool(i % 5 == 0)) for i in range(len(y))]
    return spark.createDataFrame(rows, ["id", "features", "features_array", "features_sparse", "label", "weight",
                                        "is_val"])


def pytest_runtest_logreport(report):
    if report.nodeid.startswith("tests/engines/"):
        _spent["seconds"] += report.duration
        _spent["tests"] += report.when == "call"


def pytest_terminal_summary(terminalreporter):
    if _spent["tests"]:
        terminalreporter.write_line(f"engine tests (Spark, Ray): {_spent['tests']} in {_spent['seconds']:.0f} s")
