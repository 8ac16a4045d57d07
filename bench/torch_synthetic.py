"""Synthetic PyTorch training throughput: hvdlite's DistributedOptimizer against PyTorch DDP (gloo on the CPU,
NCCL on GPUs), on the same ResNet-like model, batch size and number of processes, side by side in one run, with
single-process throughput and each one's scaling efficiency.

    python bench/torch_synthetic.py --np 2                          # table on stdout
    python bench/torch_synthetic.py --np 2 --json out.json --plot out.png
    python bench/torch_synthetic.py --np 2 --device cuda --frameworks hvdlite,ddp

With --device cuda each process trains on GPU local_rank % GPUs. Where the processes of a host outnumber its GPUs
(a test machine with one GPU), each process gets its own NCCL_HOSTID, so that NCCL (which refuses two ranks of one
host on one GPU before 2.30) treats them as separate hosts and connects them through its network transport; both
frameworks then share that transport, and their ratio still compares like with like.

Like Horovod's pytorch_synthetic_benchmark.py: every process trains on one fixed batch of random images for
--num-warmup-batches, then --num-iters timed iterations of --num-batches-per-iter steps. A job's throughput is
the sum over its processes of samples/s; scaling efficiency = throughput / (np x single-process throughput).
hvdlite and DDP run in one job under mpiexec (through hvdliterun), on copies of the same model in the same
processes, taking turns every timed iteration (the order alternating), so that both meet the same machine
load: their ratio is the median of per-iteration ratios. The single process runs alone, with one torch thread
per process everywhere; --rounds repeats the sequence (single, pair, single, ...), efficiencies are paired by
round and every other figure is a median over rounds.
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
FRAMEWORKS = ("single", "hvdlite", "ddp")
LABELS = {"single": "single process (no communication)", "hvdlite": "hvdlite DistributedOptimizer",
          "ddp": "PyTorch DDP", "pair": "hvdlite and PyTorch DDP, taking turns in one job"}
DDP_BACKENDS = {"cpu": "gloo", "cuda": "nccl"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=2, help="processes for hvdlite and DDP")
    parser.add_argument("--batch-size", type=int, default=16, help="images per process and step")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=32, help="channels of the first stage (x2, x4 after)")
    parser.add_argument("--blocks", type=int, default=1, help="residual blocks per stage (3 stages)")
    parser.add_argument("--num-classes", type=int, default=100)
    parser.add_argument("--num-warmup-batches", type=int, default=3)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=20)
    parser.add_argument("--fp16-allreduce", action="store_true", help="hvdlite: Compression.fp16")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where to train; DDP's backend is gloo on the CPU, NCCL on GPUs")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma list of: single, hvdlite, ddp")
    parser.add_argument("--rounds", type=int, default=2, help="repeats of the whole sequence (medians reported)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per framework run")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--plot", help="write a PNG bar chart here (needs matplotlib)")
    parser.add_argument("--worker", choices=FRAMEWORKS + ("pair",), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# --- worker side ---------------------------------------------------------------------------------------------

def resnet_like(args):
    """A ResNet of basic residual blocks: a 3x3 stem, ``stages`` stages (3 unless args has it; stride 2 between,
    width doubling), pool, linear. Width 64, 2 blocks, 4 stages is ResNet-18 (for 32x32 images)."""
    import torch.nn as nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(out)) + self.shortcut(x)).relu()

    layers = [nn.Conv2d(3, args.width, 3, 1, 1, bias=False), nn.BatchNorm2d(args.width), nn.ReLU()]
    cin = args.width
    for stage in range(getattr(args, "stages", 3)):
        cout = args.width * 2 ** stage
        for block in range(args.blocks):
            layers.append(BasicBlock(cin, cout, 2 if stage > 0 and block == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, args.num_classes)]
    return nn.Sequential(*layers)


def setup_hvdlite(args, model, size):
    import torch

    import hvdlite.torch as hvd
    hvd.init()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    return model, optimizer, hvd.shutdown


def setup_ddp(model, comm, rank, size, device):
    import datetime

    import torch
    import torch.distributed as dist
    # Rank 0 opens the rendezvous store on a port it keeps (no race for a free port), then tells the others.
    timeout = datetime.timedelta(seconds=120)
    store = (dist.TCPStore("127.0.0.1", 0, size, is_master=True, timeout=timeout, wait_for_workers=False)
             if rank == 0 else None)
    port = comm.bcast(store.port if rank == 0 else None, root=0)
    if rank != 0:
        store = dist.TCPStore("127.0.0.1", port, size, is_master=False, timeout=timeout)
    dist.init_process_group(DDP_BACKENDS[device.type], store=store, rank=rank, world_size=size, timeout=timeout)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size, momentum=0.9)
    return model, optimizer, dist.destroy_process_group


def run_worker(args):
    """One job: "single" (one process), "hvdlite" or "ddp" alone, or "pair": hvdlite and DDP in the same
    processes on copies of one model, taking turns every timed iteration (the order alternating), so that
    both meet the same machine load and their ratio is paired iteration by iteration."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import copy

    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank, size, comm = 0, 1, None
    local_rank, local_size = 0, 1
    if args.worker != "single":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        host = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local_rank, local_size = host.Get_rank(), host.Get_size()
        host.Free()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        if local_size > torch.cuda.device_count():  # see the module's docstring
            os.environ["NCCL_HOSTID"] = f"torch-synthetic-rank-{rank}"
    model = resnet_like(args).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    trainers, finalizers = {}, []
    if args.worker == "single":
        trainers["single"] = (model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    if args.worker in ("hvdlite", "pair"):
        *trainers["hvdlite"], finalize = setup_hvdlite(args, copy.deepcopy(model), size)
        finalizers.append(finalize)
    if args.worker in ("ddp", "pair"):
        *trainers["ddp"], finalize = setup_ddp(copy.deepcopy(model), comm, rank, size, device)
        finalizers.append(finalize)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size).to(device)
    target = torch.randint(0, args.num_classes, (args.batch_size,)).to(device)
    # A timed iteration ends when the GPU's work does, not when it is enqueued.
    finish = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(net, optimizer):
        optimizer.zero_grad()
        F.cross_entropy(net(data), target).backward()
        optimizer.step()

    for net, optimizer in trainers.values():
        for _ in range(args.num_warmup_batches):
            step(net, optimizer)
        finish()
    rates = {name: [] for name in trainers}  # this process's samples/s per timed iteration
    order = list(trainers)
    for iteration in range(args.num_iters):
        for name in (order if iteration % 2 == 0 else order[::-1]):
            net, optimizer = trainers[name]
            if comm is not None:
                comm.Barrier()
            start = time.perf_counter()
            for _ in range(args.num_batches_per_iter):
                step(net, optimizer)
            finish()
            rates[name].append(args.batch_size * args.num_batches_per_iter / (time.perf_counter() - start))
    all_rates = [rates] if comm is None else comm.gather(rates, root=0)
    if rank == 0:
        results = {}
        for name in trainers:
            totals = [sum(r[name][i] for r in all_rates) for i in range(args.num_iters)]
            results[name] = {"framework": name, "processes": size, "samples_per_s_per_iter": totals,
                             "samples_per_s": statistics.mean(totals),
                             "samples_per_s_std": statistics.stdev(totals) if len(totals) > 1 else 0.0,
                             "parameters": parameters}
        with open(args.result_file, "w") as f:
            json.dump(results, f)
    for finalize in finalizers:
        finalize()


# --- driver side ---------------------------------------------------------------------------------------------

def worker_command(args, framework, result_file):
    passthrough = []
    for key in ("batch_size", "image_size", "width", "blocks", "num_classes", "num_warmup_batches",
                "num_batches_per_iter", "num_iters", "device"):
        passthrough += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.fp16_allreduce:
        passthrough.append("--fp16-allreduce")
    command = [sys.executable, HERE, "--worker", framework, "--result-file", result_file] + passthrough
    if framework == "single":
        return command
    return [sys.executable, "-m", "hvdlite.runner", "-np", str(args.np)] + command


def run_framework(args, framework, workdir):
    """Runs one job; returns {framework: result} for each framework it timed."""
    result_file = os.path.join(workdir, f"{framework}.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    started = time.time()
    proc = subprocess.run(worker_command(args, framework, result_file), env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    if proc.returncode != 0 or not os.path.exists(result_file):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{framework} run failed (exit {proc.returncode})")
    with open(result_file) as f:
        results = json.load(f)
    for result in results.values():
        result["wall_seconds"] = round(time.time() - started, 1)
    return results


def combine(runs):
    """{framework: [one result per round]} -> {framework: summary}; medians over rounds."""
    results = {}
    for framework, rounds in runs.items():
        per_round = [r["samples_per_s"] for r in rounds]
        results[framework] = dict(rounds[0], samples_per_s=statistics.median(per_round),
                                  samples_per_s_per_round=per_round,
                                  samples_per_s_std=statistics.median(r["samples_per_s_std"] for r in rounds),
                                  wall_seconds=sum(r["wall_seconds"] for r in rounds))
        results[framework]["samples_per_s_per_iter"] = [x for r in rounds for x in r["samples_per_s_per_iter"]]
    single = runs.get("single")
    for framework, result in results.items():
        result["scaling_efficiency"] = None
        if single and framework != "single":
            result["scaling_efficiency"] = statistics.median(
                r["samples_per_s"] / (r["processes"] * s["samples_per_s"]) for r, s in zip(runs[framework], single))
    if "hvdlite" in runs and "ddp" in runs:
        # Paired iteration by iteration (they share a job), over every round.
        results["hvdlite_over_ddp"] = statistics.median(
            h / d for hr, dr in zip(runs["hvdlite"], runs["ddp"])
            for h, d in zip(hr["samples_per_s_per_iter"], dr["samples_per_s_per_iter"]))
    return results


def summarize(args, results):
    rows = []
    for framework, result in results.items():
        if framework not in FRAMEWORKS:
            continue
        efficiency = result["scaling_efficiency"]
        label = LABELS[framework] + (f" ({DDP_BACKENDS[args.device]})" if framework == "ddp" else "")
        rows.append((label, result["processes"], f"{result['samples_per_s']:.1f}",
                     f"+-{result['samples_per_s_std']:.1f}", "-" if efficiency is None else f"{100 * efficiency:.1f}%"))
    header = ("framework", "processes", "samples/s", "std", "scaling efficiency")
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(header, widths)),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    if "hvdlite_over_ddp" in results:
        lines.append(f"hvdlite / DDP throughput (median of per-iteration ratios, taking turns in one job): "
                     f"{results['hvdlite_over_ddp']:.3f}")
    return "\n".join(lines)


def plot(path, results, device):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed; no PNG written", file=sys.stderr)
        return
    names = [n for n in results if n in FRAMEWORKS]
    values = [results[n]["samples_per_s"] for n in names]
    errors = [results[n]["samples_per_s_std"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar([f"{n}\n({results[n]['processes']} proc)" for n in names], values, yerr=errors, capsize=4)
    for bar, n in zip(bars, names):
        eff = results[n].get("scaling_efficiency")
        if eff is not None:
            ax.annotate(f"{100 * eff:.0f}% eff.", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom")
    ax.set_ylabel("samples/s (all processes)")
    ax.set_title(f"Synthetic ResNet-like training, PyTorch {'GPU' if device == 'cuda' else 'CPU'}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        run_worker(args)
        return
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    unknown = set(frameworks) - set(FRAMEWORKS)
    if unknown:
        raise SystemExit(f"unknown frameworks: {sorted(unknown)}")
    runs = {framework: [] for framework in frameworks}
    # hvdlite and DDP share one job when both are asked for (see run_worker).
    jobs = [f for f in frameworks if f == "single" or not {"hvdlite", "ddp"} <= set(frameworks)]
    if {"hvdlite", "ddp"} <= set(frameworks):
        jobs.append("pair")
    with tempfile.TemporaryDirectory() as workdir:
        for round_index in range(args.rounds):
            for job in jobs:
                print(f"round {round_index + 1}/{args.rounds}: {LABELS[job]} ...", flush=True)
                for framework, result in run_framework(args, job, workdir).items():
                    runs[framework].append(result)
    results = combine(runs)
    table = summarize(args, results)
    print(f"\nmodel: ResNet-like, width {args.width}, {args.blocks} block(s)/stage, "
          f"{results[frameworks[0]]['parameters']} parameters; batch {args.batch_size} per process, "
          f"{args.image_size}x{args.image_size} images; {args.np} processes on {os.cpu_count()} cores"
          f"{', on GPUs' if args.device == 'cuda' else ''}\n")
    print(table)
    if args.json:
        payload = {"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "result_file")},
                   "cores": os.cpu_count(), "load_average": os.getloadavg(), "results": results}
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(args.plot, results, args.device)


if __name__ == "__main__":
    main()
