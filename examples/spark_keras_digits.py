"""Keras 3 + hvdlite on Spark: keras_digits.py's training, started from a Spark driver, its ranks in Spark tasks.

    python examples/spark_keras_digits.py --num-proc 2                     # a local[2] Spark of its own
    python examples/spark_keras_digits.py --num-proc 4 --master spark://host:7077

The driver starts (or joins) a SparkSession and calls hvdlite.spark.run(train, num_proc=N): N barrier tasks each
run one rank of keras_digits.train, which trains on its shard with a DistributedOptimizer, and run() returns every
rank's (size, validation accuracy, loss), in rank order. A Horovod script does the same with horovod.spark.run.
"""
import argparse
import os
import sys

import cloudpickle
from pyspark.sql import SparkSession

import hvdlite.spark

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_digits  # noqa: E402

# The tasks cannot import this folder's modules: keras_digits travels with the function, as a notebook's code does.
cloudpickle.register_pickle_by_value(keras_digits)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-proc", type=int, default=2, help="ranks (Spark tasks)")
    parser.add_argument("--master", help="Spark's master URL (default: local[num-proc])")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.002, help="learning rate of one rank (scaled by size)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the result (size, validation accuracy, loss) to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    spark = (SparkSession.builder.master(args.master or f"local[{args.num_proc}]").appName("hvdlite-keras-digits")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        results = hvdlite.spark.run(keras_digits.train, kwargs={"epochs": args.epochs, "batch_size": args.batch_size,
                                                                "lr": args.lr, "seed": args.seed},
                                    num_proc=args.num_proc, env={"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    finally:
        spark.stop()
    keras_digits.report(args, *results[0])


if __name__ == "__main__":
    main()
