"""The Spark ML TorchEstimator against hvdlite.spark.run with a hand-written loader, and its memory for a data set
larger than a rank's memory.

    python bench/spark_estimator.py [--num-proc 2] [--large-gib 3] [--cap-mib 1024] [--repeats 3] [--quick]

On a local Spark (local[num-proc]), in one run:
- fit time: ``TorchEstimator.fit`` on scikit-learn's digits as a DataFrame (its first fit writes the Parquet, a
  second finds and reuses it) beside ``hvdlite.spark.run`` of a hand-written function that trains the same model on
  the same rows (the arrays shipped with the function, each rank its shard, batches by index): the same epochs, batch
  size, ranks and seed, repeats interleaved, the median of each;
- memory: a synthetic DataFrame of --large-gib GiB (rows of 256 float32 features and a label) trained for one epoch
  by the TorchEstimator; each rank's peak resident memory (VmHWM) against the data set's size. Where this machine
  lets a memory cgroup cap a process (root, cgroup v1 or v2), each rank's process is moved into one capped at
  --cap-mib before it reads any data, so the data set is several times what a rank may hold.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import mpi4py

mpi4py.rc.initialize = False  # the driver starts no MPI: the ranks are Spark's tasks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
FEATURES = 256
CGROUP_V1, CGROUP_V2 = "/sys/fs/cgroup/memory", "/sys/fs/cgroup"


def digits_frame(spark):
    import numpy as np
    from pyspark.ml.linalg import Vectors
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float64)
    return spark.createDataFrame([(Vectors.dense(x[i]), int(y[i])) for i in range(len(y))], ["features", "label"]), \
        x.astype(np.float32), y


def net(inputs, seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(inputs, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def hand_written(x, y, epochs, batch_size, lr, seed):
    """What a user writes for hvdlite.spark.run: the arrays in the closure, a shard per rank, batches by index."""
    def train():
        import numpy as np
        import torch

        import hvdlite.torch as hvd
        hvd.init()
        model = net(x.shape[1], seed)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                             named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        mine = np.arange(hvd.rank(), len(y), hvd.size())
        steps = len(y) // (hvd.size() * batch_size)
        rng = np.random.default_rng([seed, hvd.rank()])
        for _ in range(epochs):
            order = rng.permutation(mine)
            for s in range(steps):
                pick = order[s * batch_size:(s + 1) * batch_size]
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(torch.as_tensor(x[pick])),
                                                  torch.as_tensor(y[pick]).long()).backward()
                optimizer.step()
        hvd.shutdown()
    return train


def fit_times(spark, args, store_root):
    import hvdlite.spark
    import torch
    from hvdlite.spark.common.store import Store
    from hvdlite.spark.torch import TorchEstimator
    frame, x, y = digits_frame(spark)
    frame.cache().count()
    times = {"estimator (writes Parquet)": [], "estimator (reuses Parquet)": [], "spark.run, hand-written loader": []}
    for repeat in range(args.repeats):
        store = Store.create(os.path.join(store_root, f"digits{repeat}"))
        for label in ("estimator (writes Parquet)", "estimator (reuses Parquet)"):
            model = net(64, args.seed)
            estimator = TorchEstimator(num_proc=args.num_proc, store=store, model=model,
                                       optimizer=torch.optim.SGD(model.parameters(), lr=args.lr),
                                       loss=torch.nn.CrossEntropyLoss(), feature_cols=["features"],
                                       label_cols=["label"], batch_size=args.batch_size, epochs=args.epochs,
                                       random_seed=args.seed, verbose=0)
            started = time.perf_counter()
            estimator.fit(frame)
            times[label].append(time.perf_counter() - started)
        started = time.perf_counter()
        hvdlite.spark.run(hand_written(x, y, args.epochs, args.batch_size, args.lr, args.seed), num_proc=args.num_proc)
        times["spark.run, hand-written loader"].append(time.perf_counter() - started)
        print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    return {label: {"runs_s": values, "median_s": statistics.median(values)} for label, values in times.items()}


def capped_group(cap_mib, rank):
    """A memory cgroup capped at cap_mib for a rank's process; its folder, or None where none can be made."""
    for root, limit_file in ((CGROUP_V1, "memory.limit_in_bytes"), (CGROUP_V2, "memory.max")):
        if not os.path.exists(os.path.join(root, "cgroup.procs")) or (
                root == CGROUP_V2 and not os.path.exists(os.path.join(root, "cgroup.controllers"))):
            continue
        folder = os.path.join(root, f"hvdlite-bench-rank{rank}")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, limit_file), "w") as stream:
                stream.write(str(cap_mib << 20))
            return folder
        except OSError:
            continue
    return None


class EnterCapAndRecordPeak:
    """transformation_fn of the memory run: moves the rank's process into its capped cgroup before its first
    batch is used, and keeps the process's peak resident memory in a file the driver reads."""

    def __init__(self, groups, folder):
        self.groups, self.folder, self.entered, self.seen = groups, folder, False, 0

    def __call__(self, batch):
        import hvdlite.torch as hvd
        rank = hvd.rank()
        if not self.entered:
            self.entered = True
            with open(os.path.join(self.folder, f"start{rank}"), "w") as stream:
                stream.write(str(_status_kib("VmRSS")))
            group = self.groups.get(rank)
            if group:
                with open(os.path.join(group, "cgroup.procs"), "w") as stream:
                    stream.write(str(os.getpid()))
        self.seen += 1
        if self.seen % 20 == 1:
            with open(os.path.join(self.folder, f"peak{rank}"), "w") as stream:
                stream.write(str(_status_kib("VmHWM")))
        return batch


def _status_kib(field):
    with open("/proc/self/status") as stream:
        return next(int(line.split()[1]) for line in stream if line.startswith(f"{field}:"))


def _group_peak_mib(group):
    """The most memory the cgroup was charged (what the rank allocated after entering it), where recorded."""
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            with open(os.path.join(group, name)) as stream:
                return int(stream.read()) / (1 << 20)
        except OSError:
            continue
    return None


def large_run(spark, args, store_root, folder):
    import pyspark.sql.functions as F
    import torch
    from hvdlite.spark.common.store import Store
    from hvdlite.spark.torch import TorchEstimator
    rows = int(args.large_gib * (1 << 30) / (4 * FEATURES))
    frame = spark.range(rows, numPartitions=max(8, args.num_proc * 4)).select(
        F.array(*[F.rand(seed=i).cast("float") for i in range(FEATURES)]).alias("features"),
        (F.col("id") % 10).cast("long").alias("label"))
    groups = {rank: capped_group(args.cap_mib, rank) for rank in range(args.num_proc)}
    store = Store.create(os.path.join(store_root, "large"))
    model = net(FEATURES, args.seed)
    estimator = TorchEstimator(num_proc=args.num_proc, store=store, model=model,
                               optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                               loss=torch.nn.CrossEntropyLoss(), feature_cols=["features"], label_cols=["label"],
                               batch_size=1024, epochs=1, random_seed=args.seed, verbose=0,
                               transformation_fn=EnterCapAndRecordPeak(groups, folder),
                               partitions_per_process=args.large_gib * 8)
    started = time.perf_counter()
    estimator.fit(frame)
    seconds = time.perf_counter() - started
    train = [p for p in os.listdir(store.prefix_path) if p.startswith("intermediate_train_data.")][0]
    parquet = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(os.path.join(store.prefix_path, train))
                  for f in files if f.endswith(".parquet"))
    peaks, starts = [], []
    for rank in range(args.num_proc):
        with open(os.path.join(folder, f"peak{rank}")) as stream:
            peaks.append(int(stream.read()) / 1024)
        with open(os.path.join(folder, f"start{rank}")) as stream:
            starts.append(int(stream.read()) / 1024)
    charged = [_group_peak_mib(group) if group else None for group in groups.values()]
    for group in groups.values():
        if group:
            try:
                os.rmdir(group)
            except OSError:
                pass
    return {"rows": rows, "data_mib": rows * (FEATURES + 2) * 4 / (1 << 20), "parquet_mib": parquet / (1 << 20),
            "peak_rss_mib": peaks, "rss_before_data_mib": starts, "cgroup_peak_mib": charged,
            "cap_mib": args.cap_mib if all(groups.values()) else None, "fit_s": seconds}


def table(fits, large):
    from common import format_table
    base = fits["spark.run, hand-written loader"]["median_s"]
    rows = [[label, f"{value['median_s']:.1f}", f"{value['median_s'] / base:.2f}"] for label, value in fits.items()]
    first = format_table(["digits, 2 ranks", "fit s (median)", "vs spark.run"], rows)
    def per_rank(values):
        return ", ".join("?" if v is None else f"{v:.0f}" for v in values)
    second = format_table(
        ["large data set", "rows", "in memory MiB", "Parquet MiB", "cap per rank MiB", "RSS before data MiB",
         "peak RSS MiB", "peak in the cap MiB", "fit s"],
        [["synthetic", large["rows"], f"{large['data_mib']:.0f}", f"{large['parquet_mib']:.0f}",
          large["cap_mib"] or "none", per_rank(large["rss_before_data_mib"]), per_rank(large["peak_rss_mib"]),
          per_rank(large["cgroup_peak_mib"]), f"{large['fit_s']:.0f}"]])
    return first + "\n\n" + second


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--large-gib", type=int, default=3, help="the large data set's size in memory")
    parser.add_argument("--cap-mib", type=int, default=1024, help="each rank's memory cap, where cgroups allow")
    parser.add_argument("--quick", action="store_true", help="one repeat and a 1 GiB data set")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "spark_estimator.json"))
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.large_gib = 1, 1
    import common
    import pyspark.sql
    started = time.time()
    spark = (pyspark.sql.SparkSession.builder.master(f"local[{args.num_proc}]").appName("hvdlite-bench-estimator")
             .config("spark.ui.enabled", "false").config("spark.executorEnv.OMP_NUM_THREADS", "1")
             .config("spark.driver.memory", "4g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="hvdlite-bench-estimator-") as root:
            fits = fit_times(spark, args, os.path.join(root, "stores"))
            large = large_run(spark, args, os.path.join(root, "stores"), root)
    finally:
        spark.stop()
    text = table(fits, large)
    print(text)
    # What streaming the data adds to a rank, against the rank's share of the data set (each holds a row group and a
    # batch at a time, whatever the data set's size).
    added = max(peak - start for peak, start in zip(large["peak_rss_mib"], large["rss_before_data_mib"]))
    share = large["data_mib"] / args.num_proc
    checks = [("a rank's memory added while streaming / its share of the data set (at most 0.5)", added / share,
               added / share <= 0.5)]
    common.write_json(args.json, {"benchmark": "spark_estimator", "fits": fits, "large": large, "table": text,
                                  "targets": common.targets_record(checks), "machine": common.driver_machine(started)})


if __name__ == "__main__":
    main()
