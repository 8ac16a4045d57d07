"""torch.distributed on hvdlite's backend against gloo, side by side in one job: DDP training throughput on the
hvdlite backend, on gloo, and with hvdlite's own DistributedOptimizer (ResNet-like, MLP, transformer; ResNet-18
with --models), each with its scaling efficiency against one rank training alone and the CPU each rank keeps busy
(hvdlite's background thread's share apart), and dist.all_reduce from 4 KiB to 256 MiB with the CPU it keeps busy
meanwhile.

    python bench/torch_ddp_backend.py --np 2                       # tables on stdout
    python bench/torch_ddp_backend.py --np 2 --json bench/results/torch_ddp_backend.json --plot out.png
    sudo python bench/torch_ddp_backend.py --hosts 2 --rate-mbit 1000    # 2 simulated hosts x 1 rank, 1 Gbit/s
    sudo python bench/torch_ddp_backend.py --hosts 4 --models resnet18,mlp,transformer --skip-allreduce

With --hosts the ranks run one per simulated host (network namespaces on this machine,
hvdlite/testing/simulated_hosts.py: TCP through a bridge, each host's link shaped with tc tbf; needs root), started by MPICH's
mpiexec; gloo goes through the same links (GLOO_SOCKET_IFNAME).

Every process holds a default process group on hvdlite and a gloo group beside it (new_group(backend="gloo")), and
copies of one model under DDP on each, plus one under hvdlite's DistributedOptimizer; they take turns every timed
iteration (the order rotating), so all meet the same machine load, and each ratio is the median of per-iteration
ratios (DDP on hvdlite over DDP on gloo also with the 95% confidence interval of their mean). Before them rank 0
trains a plain copy alone (the others wait) for the one-rank rate; a trainer's scaling efficiency is its samples/s
over (ranks x that rate). On simulated hosts every rank shares this machine's cores, which bounds the efficiency (4
ranks on 2 cores: at most 0.5). The all-reduces alternate hvdlite and gloo call by call on the same tensor size; each
size's time is the median over its calls.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
TRAINERS = ("ddp_gloo", "ddp_hvdlite", "hvdlite_optimizer")
LABELS = {"ddp_gloo": "DDP on gloo", "ddp_hvdlite": "DDP on hvdlite", "hvdlite_optimizer":
          "hvdlite DistributedOptimizer"}
MODELS = ("resnet", "mlp", "transformer")  # the default; also "resnet18"
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
SMALL_CALLS = 60  # per size and backend below 1 MiB


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=12)
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0,
                        help="both DDPs' gradient bucket size (DDP's default: 25)")
    parser.add_argument("--allreduce-calls", type=int, default=20,
                        help=f"per size and backend (at least {SMALL_CALLS} below 1 MiB, fewer from 16 MiB)")
    parser.add_argument("--skip-allreduce", action="store_true")
    parser.add_argument("--hosts", type=int, default=0, help="simulated hosts, one rank each (needs root)")
    parser.add_argument("--rate-mbit", type=int, default=1000, help="with --hosts: each host link's rate")
    parser.add_argument("--network", default="ofi", help="with --hosts: MPICH's network layer, ofi or ucx")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--json")
    parser.add_argument("--plot")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- worker side ---------------------------------------------------------------------------------------------

def build_model(kind):
    import torch.nn as nn
    if kind in ("resnet", "resnet18"):
        sys.path.insert(0, os.path.dirname(HERE))
        from torch_synthetic import resnet_like
        shape = dict(width=32, blocks=1, stages=3) if kind == "resnet" else dict(width=64, blocks=2, stages=4)
        return resnet_like(argparse.Namespace(num_classes=100, **shape)), (3, 32, 32), 100
    if kind == "mlp":  # communication-bound: 5.3 M parameters, little computation each
        return nn.Sequential(nn.Flatten(), nn.Linear(3072, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 100)), (3, 32, 32), 100

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(1000, 256)
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(256, 100)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)).mean(1))
    return Transformer(), (64,), 100


def train_models(args, rank, size, gloo, log):
    import copy

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import hvdlite.torch as hvd
    from hvdlite.testing import core_threads  # CPU time of hvdlite's background thread
    results = {}
    for kind in args.models.split(","):
        torch.manual_seed(0)
        model, shape, classes = build_model(kind)
        parameters = sum(p.numel() for p in model.parameters())
        trainers = {}
        for name in TRAINERS:
            net = copy.deepcopy(model)
            if name == "hvdlite_optimizer":
                opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
                opt = hvd.DistributedOptimizer(opt, named_parameters=[(f"{kind}.{n}", p)
                                                                      for n, p in net.named_parameters()])
            else:
                net = DDP(net, process_group=gloo if name == "ddp_gloo" else None, gradient_as_bucket_view=True,
                          bucket_cap_mb=args.bucket_cap_mb)
                opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
            trainers[name] = (net, opt)
        if kind == "transformer":
            data = torch.randint(0, 1000, (args.batch_size, *shape))
        else:
            data = torch.randn(args.batch_size, *shape)
        target = torch.randint(0, classes, (args.batch_size,))

        def step(net, opt):
            opt.zero_grad()
            F.cross_entropy(net(data), target).backward()
            opt.step()

        alone = copy.deepcopy(model)  # the one-rank rate: rank 0 trains it while the others wait
        dist.barrier(group=gloo)
        if rank == 0:
            alone_opt = torch.optim.SGD(alone.parameters(), lr=0.01, momentum=0.9)
            for _ in range(args.num_warmup_batches):
                step(alone, alone_opt)
            start = time.perf_counter()
            for _ in range(args.num_batches_per_iter * 2):
                step(alone, alone_opt)
            one_rank = args.batch_size * args.num_batches_per_iter * 2 / (time.perf_counter() - start)
        rate = torch.tensor([one_rank if rank == 0 else 0.0], dtype=torch.float64)
        dist.broadcast(rate, src=0, group=gloo)
        one_rank = rate.item()

        for net, opt in trainers.values():
            for _ in range(args.num_warmup_batches):
                step(net, opt)
        rates = {name: [] for name in trainers}
        cores = {name: [] for name in trainers}  # CPU cores busy per rank: the whole process, hvdlite's thread
        order = list(trainers)
        for iteration in range(args.num_iters):
            turn = order[iteration % len(order):] + order[:iteration % len(order)]
            for name in turn:
                net, opt = trainers[name]
                dist.barrier(group=gloo)
                start, start_cpu, start_core = time.perf_counter(), time.process_time(), core_threads.cpu_seconds()
                for _ in range(args.num_batches_per_iter):
                    step(net, opt)
                wall = time.perf_counter() - start
                spent = torch.tensor([(time.process_time() - start_cpu) / wall,
                                      (core_threads.cpu_seconds() - start_core) / wall], dtype=torch.float64)
                elapsed = torch.tensor([wall], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)  # the job's step time: its slowest rank
                dist.all_reduce(spent, group=gloo)
                rates[name].append(size * args.batch_size * args.num_batches_per_iter / elapsed.item())
                cores[name].append((spent / size).tolist())
        # DDP's buckets on hvdlite, as rebuilt after the first step: one c10d all-reduce each per step (the layer's
        # cost is paid per call)
        buckets = [b.buffer().numel() * b.buffer().element_size()
                   for b in trainers["ddp_hvdlite"][0].reducer._get_zeros_like_grad_buckets()]
        results[kind] = {"parameters": parameters, "samples_per_s_per_iter": rates, "cores_per_iter": cores,
                         "one_rank_samples_per_s": one_rank,
                         "ranks": size, "ddp_bucket_bytes": buckets, "batch_per_rank": args.batch_size}
        log(f"{kind}: " + ", ".join(
            f"{n} {statistics.median(r):.1f} ({statistics.median(c[0] for c in cores[n]):.2f} cores, hvdlite's thread "
            f"{statistics.median(c[1] for c in cores[n]):.2f})" for n, r in rates.items()))
    return results


def time_allreduces(args, gloo, log):
    """Each size's median time per backend, and the CPU time the process spent meanwhile (all its threads: the
    caller's, hvdlite's background thread, gloo's), as cores kept busy: what the communication takes from a
    computation running beside it. Beside them, hvdlite.torch's own all-reduce of the same tensor ("direct"):
    the difference is what the torch.distributed layer costs a call."""
    import torch
    import torch.distributed as dist

    import hvdlite.torch as hvd
    rows = []
    for nbytes in SIZES:
        x = torch.ones(nbytes // 4)
        if nbytes < (1 << 20):
            # A call takes about a millisecond, and one rank's late exit from the barrier before it moves the time as
            # much: many calls, whatever --allreduce-calls says.
            calls = max(args.allreduce_calls, SMALL_CALLS)
        elif nbytes < (16 << 20):
            calls = args.allreduce_calls
        else:
            calls = max(4, args.allreduce_calls // 4)
        runs = {"hvdlite": lambda: dist.all_reduce(x), "gloo": lambda: dist.all_reduce(x, group=gloo),
                "direct": lambda: hvd.allreduce_(x, op=hvd.Sum, name=f"bench.{nbytes}")}
        times = {name: [] for name in runs}
        cpu = {name: [] for name in runs}
        for run in runs.values():  # warm-up
            run()
        order = list(runs)
        for call in range(calls):
            for name in order[call % 3:] + order[:call % 3]:
                dist.barrier(group=gloo)
                start, start_cpu = time.perf_counter(), time.process_time()
                runs[name]()
                spent = torch.tensor([time.perf_counter() - start, time.process_time() - start_cpu],
                                     dtype=torch.float64)
                dist.all_reduce(spent, op=dist.ReduceOp.MAX, group=gloo)
                times[name].append(spent[0].item())
                cpu[name].append(spent[1].item() / spent[0].item())
        row = {"bytes": nbytes, "hvdlite_ms": 1e3 * statistics.median(times["hvdlite"]),
               "gloo_ms": 1e3 * statistics.median(times["gloo"]), "direct_ms": 1e3 * statistics.median(times["direct"]),
               "hvdlite_cpu_cores": statistics.median(cpu["hvdlite"]), "gloo_cpu_cores": statistics.median(cpu["gloo"])}
        row["gloo_over_hvdlite"] = row["gloo_ms"] / row["hvdlite_ms"]
        rows.append(row)
        log(f"all_reduce {nbytes >> 10} KiB: hvdlite {row['hvdlite_ms']:.3f} ms, gloo {row['gloo_ms']:.3f} ms, "
            f"hvdlite.torch direct {row['direct_ms']:.3f} ms, "
            f"{row['gloo_over_hvdlite']:.2f}x; CPU cores busy {row['hvdlite_cpu_cores']:.2f} and "
            f"{row['gloo_cpu_cores']:.2f}")
    return rows


def run_worker(args):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist

    import hvdlite.torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("hvdlite")
    gloo = dist.new_group(backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    def log(text):
        if rank == 0:
            print(text, flush=True)
    results = {"training": train_models(args, rank, size, gloo, log)}
    if not args.skip_allreduce:
        results["allreduce"] = time_allreduces(args, gloo, log)
    if rank == 0:
        with open(args.result_file, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


# --- driver side ---------------------------------------------------------------------------------------------

def summarize(results):
    lines = ["| model (parameters) | DDP on gloo | DDP on hvdlite | hvdlite DistributedOptimizer | "
             "DDP on hvdlite / on gloo (95% interval of the mean) | DDP on hvdlite / DistributedOptimizer | "
             "DistributedOptimizer / DDP on gloo | "
             "scaling efficiency (gloo, hvdlite, optimizer) |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for kind, r in results["training"].items():
        rates = r["samples_per_s_per_iter"]
        efficiency = ", ".join(f"{e:.2f}" for e in r["scaling_efficiency"].values()) if "scaling_efficiency" in r \
            else "-"
        interval = " ({:.3f}-{:.3f})".format(*r["hvdlite_over_gloo_interval"]) if "hvdlite_over_gloo_interval" in r \
            else ""
        lines.append(f"| {kind} ({r['parameters']:,}) | " +
                     " | ".join(f"{statistics.median(rates[n]):.1f}" for n in TRAINERS) +
                     f" | {r['hvdlite_over_gloo']:.3f}{interval} | {r['hvdlite_over_optimizer']:.3f} | "
                     f"{r['optimizer_over_gloo']:.3f} | {efficiency} |")
    measured = [(kind, r["cores_per_iter"]) for kind, r in results["training"].items() if "cores_per_iter" in r]
    if measured:
        lines += ["", "CPU cores each rank kept busy while training (process CPU time over wall time, all threads), and "
                  "of those hvdlite's background thread:", "",
                  "| model | DDP on gloo | DDP on hvdlite (its thread) | DistributedOptimizer (its thread) |",
                  "|---|---:|---:|---:|"]
        for kind, cores in measured:
            process = {n: statistics.median(c[0] for c in cores[n]) for n in TRAINERS}
            thread = {n: statistics.median(c[1] for c in cores[n]) for n in TRAINERS}
            lines.append(f"| {kind} | {process['ddp_gloo']:.2f} | {process['ddp_hvdlite']:.2f} "
                         f"({thread['ddp_hvdlite']:.2f}) | {process['hvdlite_optimizer']:.2f} "
                         f"({thread['hvdlite_optimizer']:.2f}) |")
    if results.get("allreduce"):
        cores = "hvdlite_cpu_cores" in results["allreduce"][0]
        direct = "direct_ms" in results["allreduce"][0]
        lines += ["", "| all_reduce | hvdlite ms | gloo ms | hvdlite speed / gloo |" +
                  (" hvdlite.torch direct ms |" if direct else "") +
                  (" CPU cores busy meanwhile (hvdlite, gloo) |" if cores else ""),
                  "|---:|---:|---:|---:|" + ("---:|" if direct else "") + ("---|" if cores else "")]
        for row in results["allreduce"]:
            size = f"{row['bytes'] >> 20} MiB" if row["bytes"] >= 1 << 20 else f"{row['bytes'] >> 10} KiB"
            cpu = f" {row['hvdlite_cpu_cores']:.2f}, {row['gloo_cpu_cores']:.2f} |" if cores else ""
            lines.append(f"| {size} | {row['hvdlite_ms']:.3f} | {row['gloo_ms']:.3f} | {row['gloo_over_hvdlite']:.2f} |"
                         + (f" {row['direct_ms']:.3f} |" if direct else "") + cpu)
        layer = [(kind, r) for kind, r in results["training"].items() if "layer_cost_of_step" in r]
        if layer:
            lines += ["", "What the torch.distributed layer costs a DDP step on hvdlite: its cost per call (the median "
                      "of hvdlite's all_reduce time less hvdlite.torch's direct one, 4 KiB-1 MiB, above) times "
                      "DDP's buckets, one all-reduce each:", "",
                      "| model | DDP buckets (MB) | layer ms per call | layer ms per step | DDP on hvdlite step ms | "
                      "share of the step |", "|---|---|---:|---:|---:|---:|"]
            for kind, r in layer:
                sizes = ", ".join(f"{b / 1e6:.1f}" for b in r["ddp_bucket_bytes"])
                lines.append(f"| {kind} | {sizes} | {r['layer_ms_per_call']:.3f} | {r['layer_ms_per_step']:.3f} | "
                             f"{r['ddp_hvdlite_step_ms']:.1f} | {r['layer_cost_of_step']:.4f} |")
    return "\n".join(lines)


# Student's t at 0.975 by degrees of freedom (1-30; beyond, the normal's 1.96): the 95% interval of a mean of few
# per-iteration ratios, so that "no slower" can be told from this machine's run-to-run noise.
T_975 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.10,
         2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]


def mean_interval(values):
    """The 95% confidence interval of the mean of values (at least 2)."""
    mean, n = statistics.mean(values), len(values)
    half = (T_975[n - 2] if n - 1 <= len(T_975) else 1.96) * statistics.stdev(values) / n ** 0.5
    return [mean - half, mean + half]


def add_ratios(results):
    for r in results["training"].values():
        rates = r["samples_per_s_per_iter"]
        ratios = [h / g for h, g in zip(rates["ddp_hvdlite"], rates["ddp_gloo"])]
        r["hvdlite_over_gloo"] = statistics.median(ratios)
        if len(ratios) >= 2:
            r["hvdlite_over_gloo_interval"] = mean_interval(ratios)
        r["hvdlite_over_optimizer"] = statistics.median(
            h / o for h, o in zip(rates["ddp_hvdlite"], rates["hvdlite_optimizer"]))
        r["optimizer_over_gloo"] = statistics.median(
            o / g for o, g in zip(rates["hvdlite_optimizer"], rates["ddp_gloo"]))
        rows = [row for row in results.get("allreduce") or [] if "direct_ms" in row and row["bytes"] <= 1 << 20]
        if rows and r.get("ddp_bucket_bytes"):
            # The layer's cost is per call (a contiguous bucket is reduced in place, not copied): measured where the
            # transfer's own time varies least, up to 1 MiB, and paid once per bucket.
            per_call_ms = statistics.median(row["hvdlite_ms"] - row["direct_ms"] for row in rows)
            step_ms = 1e3 * r["ranks"] * r["batch_per_rank"] / statistics.median(rates["ddp_hvdlite"])
            r["layer_ms_per_call"] = per_call_ms
            r["layer_ms_per_step"] = per_call_ms * len(r["ddp_bucket_bytes"])
            r["ddp_hvdlite_step_ms"] = step_ms
            r["layer_cost_of_step"] = r["layer_ms_per_step"] / step_ms
        if r.get("one_rank_samples_per_s"):
            r["scaling_efficiency"] = {name: statistics.median(rates[name]) / (r["ranks"] * r["one_rank_samples_per_s"])
                                       for name in TRAINERS}


def plot(path, results):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no PNG written", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    kinds = list(results["training"])
    width = 0.27
    for i, name in enumerate(TRAINERS):
        values = [statistics.median(results["training"][k]["samples_per_s_per_iter"][name]) for k in kinds]
        axes[0].bar([x + (i - 1) * width for x in range(len(kinds))], values, width, label=LABELS[name])
    axes[0].set_xticks(range(len(kinds)), kinds)
    axes[0].set_ylabel("samples/s (all ranks)")
    axes[0].legend()
    axes[0].set_title("Training")
    if results.get("allreduce"):
        rows = results["allreduce"]
        axes[1].plot([r["bytes"] for r in rows], [r["gloo_over_hvdlite"] for r in rows], marker="o")
        axes[1].set_xscale("log", base=2)
        axes[1].axhline(1.0, color="grey", lw=0.8)
        axes[1].set_xlabel("bytes")
        axes[1].set_ylabel("hvdlite speed / gloo")
        axes[1].set_title("dist.all_reduce")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def run_on_simulated_hosts(args, worker, env):
    from hvdlite.testing import simulated_hosts
    with simulated_hosts.hosts_for_bench(args.hosts, "--hosts", rate_mbit=args.rate_mbit or None) as hosts:
        variables = [("MASTER_ADDR", hosts.address("h1")), ("GLOO_SOCKET_IFNAME", "eth0"),
                     ("OMP_NUM_THREADS", "1"), *simulated_hosts.NETWORK_LAYERS[args.network].items()]
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        argv = simulated_hosts.mpiexec_argv(hosts, mpiexec, 1, "blocks", worker, env=variables)
        process = hosts.popen("h1", argv, env=env, cwd=os.path.dirname(os.path.dirname(HERE)))
        try:
            return process.wait(timeout=args.timeout)
        finally:
            hosts.kill_processes()


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        run_worker(args)
        return
    with tempfile.TemporaryDirectory() as workdir:
        result_file = os.path.join(workdir, "result.json")
        passthrough = []
        for key in ("models", "batch_size", "num_warmup_batches", "num_batches_per_iter", "num_iters",
                    "allreduce_calls", "bucket_cap_mb"):
            passthrough += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        if args.skip_allreduce:
            passthrough.append("--skip-allreduce")
        worker = [sys.executable, HERE, "--worker", "--result-file", result_file] + passthrough
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if args.hosts:
            code = run_on_simulated_hosts(args, worker, env)
        else:
            code = subprocess.run([sys.executable, "-m", "hvdlite.runner", "-np", str(args.np)] + worker, env=env,
                                  timeout=args.timeout).returncode
        if code != 0 and not os.path.exists(result_file):
            raise SystemExit(f"the job failed (exit {code})")
        if code != 0:  # torch's gloo group may abort at exit, after the results are written
            print(f"the job exited with {code} after writing its results", file=sys.stderr)
        with open(result_file) as f:
            results = json.load(f)
    add_ratios(results)
    print()
    print(summarize(results))
    if args.json:
        payload = {"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "result_file")},
                   "cores": os.cpu_count(), "load_average": os.getloadavg(), "results": results,
                   "table": summarize(results)}
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(args.plot, results)


if __name__ == "__main__":
    main()
