"""hvdlite's TorchEstimator on a Spark DataFrame: scikit-learn's digits as a DataFrame of Spark ML vectors, fit on
ranks in Spark tasks, transform with the trained model, and the model saved and loaded as a Spark ML stage.

    python examples/spark_torch_estimator_digits.py --num-proc 2                   # a local[2] Spark of its own
    python examples/spark_torch_estimator_digits.py --num-proc 4 --master spark://host:7077 --store /shared/run

A Horovod user's Estimator code runs with its imports changed: horovod.spark.torch -> hvdlite.spark.torch,
horovod.spark.common.store -> hvdlite.spark.common.store.
"""
import argparse
import json
import os
import tempfile

import numpy as np
import torch
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from sklearn.datasets import load_digits

from hvdlite.spark.common.store import Store
from hvdlite.spark.torch import TorchEstimator, TorchModel


def accuracy(outputs, labels):
    return (outputs.argmax(dim=1) == labels).float().mean()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-proc", type=int, default=2, help="ranks (Spark tasks)")
    parser.add_argument("--master", help="Spark's master URL (default: local[num-proc])")
    parser.add_argument("--store", help="the Store's path, reachable from every worker (default: a temporary folder)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the validation accuracy and the test accuracy to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    spark = (SparkSession.builder.master(args.master or f"local[{args.num_proc}]").appName("hvdlite-torch-estimator")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    x, y = load_digits(return_X_y=True)
    rows = [(Vectors.dense(x[i] / 16.0), int(y[i])) for i in range(len(y))]
    train_df, test_df = spark.createDataFrame(rows, ["features", "label"]).randomSplit([0.8, 0.2], seed=args.seed)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    with tempfile.TemporaryDirectory() as scratch:
        store = Store.create(args.store or os.path.join(scratch, "store"))
        estimator = TorchEstimator(num_proc=args.num_proc, store=store, model=model,
                                   optimizer=torch.optim.SGD(model.parameters(), lr=args.lr),
                                   loss=torch.nn.CrossEntropyLoss(), metrics=[accuracy], feature_cols=["features"],
                                   label_cols=["label"], validation=0.1, batch_size=args.batch_size,
                                   epochs=args.epochs, random_seed=args.seed)
        trained = estimator.fit(train_df).setOutputCols(["scores"])
        path = os.path.join(scratch, "model")
        trained.save(path)
        loaded = TorchModel.load(path)
        scored = loaded.transform(test_df).select("label", "scores").collect()
        test_accuracy = float(np.mean([np.argmax(r.scores) == r.label for r in scored]))
        result = {"val_accuracy": trained.getHistory()["val_accuracy"][-1], "test_accuracy": test_accuracy}
    print(f"validation accuracy {result['val_accuracy']:.3f}, test accuracy {result['test_accuracy']:.3f} "
          f"({args.num_proc} ranks)")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(result, stream)
    spark.stop()


if __name__ == "__main__":
    main()
