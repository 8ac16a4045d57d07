"""What hvdlite.tensorflow adds on top of the core, per allreduce: the measurement behind "no custom op".

    mpiexec -n 2 python bench/tf_op_overhead.py [--json out.json]

For each message size, the median time of one allreduce through
  core          hvdlite.allreduce on a NumPy array (the core's own cost: negotiation + reduction),
  tf eager      hvdlite.tensorflow.allreduce on an eager tensor (views in, DLPack out),
  tf.function   the same inside a tf.function (a stateful tf.numpy_function op),
and, without any communication, what a tf.numpy_function round trip costs inside a tf.function against
tf.identity: the most a C++ op compiled against TensorFlow could save per collective.
"""
import argparse
import json
import os
import time

for _var in ("OMP_NUM_THREADS", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.tensorflow as hvd  # noqa: E402

SIZES = (1 << 10, 64 << 10, 1 << 20, 16 << 20)


def median_us(fn, repeats):
    for _ in range(5):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1e6 * float(np.median(samples))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args()
    hvd.init()
    rows = []
    for nbytes in SIZES:
        repeats = max(10, args.repeats // max(1, nbytes >> 20))
        array = np.ones(nbytes // 4, np.float32)
        tensor = tf.constant(array)
        in_graph = tf.function(lambda x: hvd.allreduce(x, name="overhead.graph"))
        round_trip = tf.function(lambda x: tf.numpy_function(lambda a: a, [x], tf.float32))
        identity = tf.function(lambda x: tf.identity(x))
        row = {
            "bytes": nbytes,
            "core_us": median_us(lambda: hvdlite.allreduce(array, name="overhead.core"), repeats),
            "tf_eager_us": median_us(lambda: hvd.allreduce(tensor, name="overhead.eager"), repeats),
            "tf_function_us": median_us(lambda: in_graph(tensor), repeats),
            "numpy_function_round_trip_us": median_us(lambda: round_trip(tensor), repeats),
            "tf_native_op_us": median_us(lambda: identity(tensor), repeats),
        }
        rows.append(row)
    if hvd.rank() == 0:
        print(f"allreduce of float32 on {hvd.size()} ranks, median microseconds per call")
        header = (f"{'bytes':>10s} {'core':>10s} {'tf eager':>10s} {'tf.function':>12s} "
                  f"{'numpy_fn trip':>14s} {'native op':>10s}")
        print(header)
        print("-" * len(header))
        for r in rows:
            print(f"{r['bytes']:10d} {r['core_us']:10.1f} {r['tf_eager_us']:10.1f} {r['tf_function_us']:12.1f} "
                  f"{r['numpy_function_round_trip_us']:14.1f} {r['tf_native_op_us']:10.1f}")
        if args.json:
            with open(args.json, "w") as stream:
                json.dump({"ranks": hvd.size(), "rows": rows}, stream, indent=2)


if __name__ == "__main__":
    main()
