"""Synthetic Keras training throughput: hvdlite's DistributedOptimizer against tf.distribute's
MultiWorkerMirroredStrategy, on the same model, data sizes and number of processes, side by side in one run.

    python bench/tf_synthetic.py --np 2                     # table on stdout
    python bench/tf_synthetic.py --np 2 --json out.json --plot out.png

Variants (--frameworks, comma-separated):
  hvdlite-fit    model.fit with hvdlite.tensorflow.keras.DistributedOptimizer (launched with mpiexec)
  hvdlite-loop   the same optimizer in a custom tf.function training step (launched with mpiexec)
  mwms-loop      MultiWorkerMirroredStrategy: strategy.run of the same step with a plain Keras optimizer, which
                 all-reduces the gradients itself (workers are separate processes that find each other through
                 TF_CONFIG on 127.0.0.1 ports)
  single-fit     one process, no distribution (context)
MultiWorkerMirroredStrategy is measured with a custom loop because Keras 3's model.fit fails under it with
more than one worker (trainer.reduce_per_replica asks for a MEAN over axis 0 of the scalar logs).

Every variant runs --warmup-steps + --steps steps of --batch-size samples per process, reads the loss back
every step, and reports samples/s over the timed steps (all processes together). Each process gets one
TensorFlow thread per pool (TF_NUM_*_THREADS=1) unless --tf-threads says otherwise.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from hvdlite.runner import binding
from hvdlite.runner.mpiexec import detect_flavour

HERE = os.path.abspath(__file__)
LABELS = {"hvdlite-fit": "hvdlite DistributedOptimizer, model.fit",
          "hvdlite-loop": "hvdlite DistributedOptimizer, custom loop",
          "mwms-loop": "MultiWorkerMirroredStrategy, custom loop",
          "single-fit": "single process, model.fit"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="processes per framework")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--hidden", type=int, default=512, help="mlp: width of the 3 hidden layers")
    parser.add_argument("--batch-size", type=int, default=64, help="per process")
    parser.add_argument("--steps", type=int, default=40, help="timed steps")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--frameworks", default="hvdlite-fit,hvdlite-loop,mwms-loop",
                        help="comma list of: " + ", ".join(LABELS))
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the variants this many times, interleaved; report the median (noisy hosts)")
    parser.add_argument("--tf-threads", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per framework run")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="write a PNG bar chart here (needs matplotlib)")
    # Internal: the worker side.
    parser.add_argument("--worker", choices=tuple(LABELS), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- worker side ---------------------------------------------------------------------------------------------

def build_model(args):
    import keras
    if args.model == "mlp":
        layers = [keras.Input((256,))] + [keras.layers.Dense(args.hidden, activation="relu") for _ in range(3)]
    else:
        layers = [keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
                  keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(),
                  keras.layers.Flatten(), keras.layers.Dense(128, activation="relu")]
    return keras.Sequential(layers + [keras.layers.Dense(10)])


def synthetic_data(args, samples, seed):
    import numpy as np
    rng = np.random.RandomState(seed)
    shape = (samples, 256) if args.model == "mlp" else (samples, 28, 28, 1)
    return rng.rand(*shape).astype(np.float32), rng.randint(0, 10, size=samples).astype(np.int64)


class StepTimer:
    """A Keras callback recording the time at the end of every training batch."""

    def __new__(cls):
        import keras

        class _Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.ends = []

            def on_train_batch_end(self, batch, logs=None):
                self.ends.append(time.perf_counter())
        return _Timer()


def timed_fit(args, model, x, y, batch_size, callbacks=()):
    timer = StepTimer()
    model.fit(x, y, batch_size=batch_size, epochs=1, steps_per_epoch=args.warmup_steps + args.steps,
              shuffle=False, verbose=0, callbacks=list(callbacks) + [timer])
    return timer.ends


def timed_loop(args, step, batches):
    """Runs step(*batch) for every batch, reading the loss back each time; returns the end times."""
    ends = []
    for batch in batches:
        float(step(*batch))
        ends.append(time.perf_counter())
    return ends


def per_example_loss(y, logits):
    import keras
    return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


def run_worker(args):
    import keras
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    steps = args.warmup_steps + args.steps
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def make_optimizer():  # created after the strategy: MWMS must configure TensorFlow's runtime first
        return keras.optimizers.SGD(0.01, momentum=0.9)
    if args.worker.startswith("hvdlite"):
        import hvdlite.tensorflow.keras as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        keras.utils.set_random_seed(rank)
        model = build_model(args)
        optimizer = hvd.DistributedOptimizer(make_optimizer())
        x, y = synthetic_data(args, steps * args.batch_size, seed=rank)
        if args.worker == "hvdlite-fit":
            model.compile(optimizer=optimizer, loss=loss, jit_compile=False)
            ends = timed_fit(args, model, x, y, args.batch_size,
                             callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        else:
            optimizer.build(model.trainable_variables)
            hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)

            @tf.function
            def step(xb, yb):
                with tf.GradientTape() as tape:
                    value = tf.reduce_mean(per_example_loss(yb, model(xb, training=True)))
                grads = tape.gradient(value, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return value
            b = args.batch_size
            ends = timed_loop(args, step, [(tf.constant(x[i * b:(i + 1) * b]), tf.constant(y[i * b:(i + 1) * b]))
                                           for i in range(steps)])
    elif args.worker == "mwms-loop":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        rank, size = json.loads(os.environ["TF_CONFIG"])["task"]["index"], strategy.num_replicas_in_sync
        global_batch = args.batch_size * size
        with strategy.scope():
            model = build_model(args)
            optimizer = make_optimizer()
            optimizer.build(model.trainable_variables)
        x, y = synthetic_data(args, steps * global_batch, seed=rank)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                value = tf.nn.compute_average_loss(per_example_loss(yb, model(xb, training=True)),
                                                   global_batch_size=global_batch)
            grads = tape.gradient(value, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces the gradients
            return value

        @tf.function
        def step(batch):
            return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)
        ends = timed_loop(args, step, [(next(iterator),) for _ in range(steps)])
    else:
        rank, size = 0, 1
        model = build_model(args)
        model.compile(optimizer=make_optimizer(), loss=loss, jit_compile=False)
        x, y = synthetic_data(args, steps * args.batch_size, seed=0)
        ends = timed_fit(args, model, x, y, args.batch_size)
    seconds = ends[-1] - ends[args.warmup_steps - 1] if args.warmup_steps > 0 else ends[-1] - ends[0]
    if rank == 0 and args.result_file:
        params = int(sum(v.numpy().size for v in model.trainable_variables))
        with open(args.result_file, "w") as stream:
            json.dump({"framework": args.worker, "processes": size, "seconds": seconds, "parameters": params,
                       "samples_per_second": args.steps * args.batch_size * size / seconds,
                       "step_ms": 1000.0 * seconds / args.steps}, stream)


# --- driver side ---------------------------------------------------------------------------------------------

def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def worker_command(args, framework, result_file):
    command = [sys.executable, HERE, "--worker", framework, "--result-file", result_file, "--model", args.model,
               "--hidden", str(args.hidden), "--batch-size", str(args.batch_size), "--steps", str(args.steps),
               "--warmup-steps", str(args.warmup_steps)]
    return command


def worker_env(args):
    env = dict(os.environ)
    threads = str(args.tf_threads)
    env.update(OMP_NUM_THREADS=threads, TF_NUM_INTEROP_THREADS=threads, TF_NUM_INTRAOP_THREADS=threads,
               TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return env


def mpiexec_path():
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


def run_framework(args, framework, workdir):
    result_file = os.path.join(workdir, f"{framework}.json")
    env = worker_env(args)
    command = worker_command(args, framework, result_file)
    # hvdlite's ranks bound as hvdliterun binds them by default; the MultiWorkerMirroredStrategy workers pinned
    # to the same CPUs, so that both frameworks run alike.
    placement = binding.plan(binding.AUTO, args.np, None, binding.allowed_cpus())
    if framework.startswith("hvdlite"):
        mpiexec = mpiexec_path()
        flags = binding.binding_arguments(detect_flavour(mpiexec), placement)
        processes = [subprocess.Popen([mpiexec, "-n", str(args.np), *flags] + command, env=env)]
    elif framework == "mwms-loop":
        workers = [f"127.0.0.1:{port}" for port in free_ports(args.np)]
        processes = []
        for index in range(args.np):
            worker = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                     "task": {"type": "worker", "index": index}}))
            cpus = placement.cpu_sets[index] if placement.cpu_sets else None
            bind = (lambda cpus=cpus: os.sched_setaffinity(0, cpus)) if cpus else None
            processes.append(subprocess.Popen(command, env=worker, preexec_fn=bind))
    else:
        processes = [subprocess.Popen(command, env=env)]
    deadline = time.monotonic() + args.timeout
    codes = []
    for process in processes:
        try:
            codes.append(process.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise RuntimeError(f"{framework} run exceeded {args.timeout}s")
    if any(codes) or not os.path.exists(result_file):
        raise RuntimeError(f"{framework} run failed (exit codes {codes})")
    with open(result_file) as stream:
        return json.load(stream)


def median_result(rounds):
    """The round with the median throughput, with every round's samples/s attached."""
    ordered = sorted(rounds, key=lambda r: r["samples_per_second"])
    result = dict(ordered[len(ordered) // 2])
    result["rounds_samples_per_second"] = [r["samples_per_second"] for r in rounds]
    return result


def print_table(args, results):
    print(f"\nKeras training, {args.model} model, {args.batch_size} samples per process per step, "
          f"{args.steps} timed steps after {args.warmup_steps} warm-up steps"
          + (f", median of {args.rounds} rounds" if args.rounds > 1 else ""))
    header = f"{'framework':44s} {'processes':>9s} {'samples/s':>11s} {'step ms':>9s}  {'all rounds':s}"
    print(header)
    print("-" * len(header))
    for r in results:
        every = " ".join(f"{v:.0f}" for v in r["rounds_samples_per_second"])
        print(f"{LABELS[r['framework']]:44s} {r['processes']:9d} {r['samples_per_second']:11.1f} {r['step_ms']:9.2f}"
              f"  {every}")
    by_name = {r["framework"]: r for r in results}
    if "mwms-loop" in by_name:
        for name in ("hvdlite-loop", "hvdlite-fit"):
            if name in by_name:
                ratio = by_name[name]["samples_per_second"] / by_name["mwms-loop"]["samples_per_second"]
                print(f"{LABELS[name]} / {LABELS['mwms-loop']}: {ratio:.2f}x")


def plot(path, args, results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot: matplotlib is not installed; {path} not written", file=sys.stderr)
        return
    figure, axes = plt.subplots(figsize=(6, 3.5))
    names = [r["framework"] for r in results]
    colours = ["tab:orange" if name.startswith("mwms") else "tab:gray" if name.startswith("single") else "tab:blue"
               for name in names]
    axes.bar(names, [r["samples_per_second"] for r in results], color=colours)
    axes.set_ylabel("samples/s")
    axes.set_title(f"Keras training, {args.model}, {args.np} processes, batch {args.batch_size}/process")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        run_worker(args)
        return 0
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(frameworks) - set(LABELS)
    if unknown:
        raise SystemExit(f"unknown frameworks: {sorted(unknown)}")
    runs = {framework: [] for framework in frameworks}
    with tempfile.TemporaryDirectory(prefix="hvdlite_tf_bench_") as workdir:
        for round_index in range(args.rounds):
            for framework in frameworks:
                print(f"round {round_index + 1}/{args.rounds}: {LABELS[framework]} ...", flush=True)
                runs[framework].append(run_framework(args, framework, workdir))
    results = [median_result(runs[framework]) for framework in frameworks]
    print_table(args, results)
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "result_file")},
                       "results": results}, stream, indent=2)
        print(f"wrote {args.json}")
    if args.plot:
        plot(args.plot, args, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
