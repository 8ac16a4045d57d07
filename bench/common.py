"""What every benchmark under bench/ shares: side-by-side timing under mpiexec, tables, JSON and plots.

Every figure is a ratio measured in one run on the same machine: the methods compared are timed in
interleaved rounds (A B C, A B C, ...) after warm-up, each round a batch of iterations whose count all ranks
agree on; a round's time is the slowest rank's, and the reported figure is the median over rounds. Ratios
are medians of per-round ratios, so slow drift of a noisy machine cancels out.
"""
import argparse
import json
import os
import re
import platform
import statistics
import subprocess
import sys
import time

from mpi4py import MPI

COMM = MPI.COMM_WORLD


def relaunch_under_mpiexec(nranks=2):
    """Run as plain `python bench/x.py` (as `make bench` does), re-run this script under mpiexec -n nranks."""
    if size() > 1 or os.environ.get("HVDLITE_BENCH_LAUNCHED"):
        return
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        mpiexec = "mpiexec"
    binding = launch_binding(mpiexec, nranks)
    env = dict(os.environ, HVDLITE_BENCH_LAUNCHED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               HVDLITE_BENCH_BINDING=" ".join(binding))
    command = [mpiexec, "-n", str(nranks), *binding, sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
    print("$ OMP_NUM_THREADS=%s %s" % (env["OMP_NUM_THREADS"], " ".join(command)), flush=True)
    sys.exit(subprocess.call(command, env=env))


def separate_launches(script, count, options):
    """Runs `python script --launches 1 OPTIONS` count times, one after the other (each relaunches itself under
    mpiexec, so each is a job of its own), and returns the results each wrote."""
    import tempfile
    results = []
    with tempfile.TemporaryDirectory(prefix="hvdlite-bench-") as folder:
        for launch in range(count):
            path = os.path.join(folder, f"launch{launch}.json")
            print(f"launch {launch + 1} of {count}", flush=True)
            code = subprocess.call([sys.executable, script, "--launches", "1", "--json", path, *options])
            if code != 0:
                raise SystemExit(f"{os.path.basename(script)}: launch {launch + 1} of {count} failed (exit {code})")
            with open(path) as f:
                results.append(json.load(f))
    return results


def launches_machine(runs):
    """The machine record of a figure over separate launches: the first launch's, with the command that ran them
    all and the one each launch ran (its JSON path a temporary file)."""
    launch_command = re.sub(r"--json \S+", "--json LAUNCH.json", runs[0]["machine"]["command"])
    return dict(runs[0]["machine"], command=this_command(), launch_command=launch_command)


def add_launch_arguments(parser, launches):
    """The arguments of a benchmark of small tensors whose figures are medians over separate launches."""
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--kib", type=int, default=16)
    parser.add_argument("--launches", type=int, default=launches,
                        help="separate jobs to run; figures are medians over them (1: this job only)")
    # 21 rounds, not 7: this VM's speed swings within seconds, and a round's batches run ~1 s apart. The same build
    # gave 1.23-1.54x pointer-level one by one over five 7-round runs, 1.38-1.43x over three of 21 (medians alike).
    parser.set_defaults(repeats=21)


def run_launches(args, over_launches, measure):
    """Run as plain python with --launches > 1: over_launches(args) (which runs separate launches); else this one
    launch under mpiexec: measure(args). Writes --json and returns the result. --quick: one launch of 3 rounds."""
    if args.quick:
        args.repeats = min(args.repeats, 3)
        args.launches = 1
    if args.launches > 1 and size() == 1:
        result = over_launches(args)
    else:
        relaunch_under_mpiexec()
        result = measure(args)
    write_json(args.json, result)
    return result


def this_command():
    """How this script was started, paths relative to the repository."""
    return " ".join(["python", *_relative_argv()])


def launch_binding(mpiexec, nranks):
    """mpiexec options binding the ranks as hvdliterun does by default (--bind-to auto): every method compared
    runs in the same bound processes."""
    from hvdlite.runner import binding
    from hvdlite.runner.mpiexec import detect_flavour
    return binding.binding_arguments(detect_flavour(mpiexec), binding.plan(binding.AUTO, nranks, None,
                                                                           binding.allowed_cpus()))


def rank():
    return COMM.Get_rank()


def size():
    return COMM.Get_size()


def say(*args):
    if rank() == 0:
        print(*args, flush=True)


def base_arguments(description, name):
    """The options every MPI benchmark shares; results default to bench/results/NAME.json and the plot to
    docs/benchmarks/NAME.png."""
    here = os.path.dirname(os.path.abspath(__file__))
    default_json = os.path.join(here, "results", f"{name}.json")
    default_plot = os.path.join(here, os.pardir, "docs", "benchmarks", f"{name}.png")
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds per measurement (median)")
    parser.add_argument("--budget", type=float, default=0.08, help="seconds per timed batch")
    parser.add_argument("--json", default=default_json, help="where to write the results")
    parser.add_argument("--plot", nargs="?", const=default_plot, default=None, help="write a PNG (path)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sizes (a smoke run)")
    return parser


def agreed_iterations(function, budget, minimum=2, maximum=20000):
    """Iterations that take about budget seconds on the slowest rank (the same count everywhere)."""
    probe = 1
    while True:  # every rank makes the same number of calls: they are collectives
        per_call = timed_batch(function, probe)
        if per_call * probe > budget / 8 or probe >= 256:
            break
        probe *= 2
    return int(min(maximum, max(minimum, budget / per_call)))


def timed_batch(function, iterations):
    """Seconds per call of the slowest rank over one batch."""
    COMM.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        function()
    elapsed = (time.perf_counter() - start) / iterations
    return COMM.allreduce(elapsed, op=MPI.MAX)


def interleaved(methods, repeats, budget, warmup=3):
    """{name: [seconds per call, one per round]} for methods {name: function}, timed in interleaved rounds."""
    counts = {}
    for name, function in methods.items():
        for _ in range(warmup):
            function()
        counts[name] = agreed_iterations(function, budget)
    rounds = {name: [] for name in methods}
    for _ in range(repeats):
        for name, function in methods.items():
            rounds[name].append(timed_batch(function, counts[name]))
    return rounds


def median(values):
    return statistics.median(values)


def median_ratio(numerators, denominators):
    """Median over rounds of numerator/denominator (paired by round)."""
    return statistics.median(a / b for a, b in zip(numerators, denominators))


def machine_info():
    import numpy
    launcher = "OMP_NUM_THREADS=%s mpiexec -n %d" % (os.environ.get("OMP_NUM_THREADS", ""), size())
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ranks": size(),
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi4py": __import__("mpi4py").__version__,
        "numpy": numpy.__version__,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", ""),
        "load_average": os.getloadavg(),
        "git": _git_revision(),
        "command": " ".join(filter(None, [launcher, os.environ.get("HVDLITE_BENCH_BINDING"), this_command()])),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def driver_machine(started):
    """The machine record of a benchmark's driver on simulated hosts (no MPI in it), which started at started."""
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "git": _git_revision(),
            "command": "python " + " ".join(_relative_argv()), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "seconds": round(time.time() - started)}


def _relative_argv():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.relpath(a, root) if os.path.isabs(a) and a.startswith(root) else a for a in sys.argv]


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_revision():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        return ""


def hosts_driver_arguments(doc, name):
    """The options every benchmark across simulated hosts shares (its driver launches jobs of itself: --job,
    --job-json); results default to bench/results/NAME.json, the plot to docs/benchmarks/NAME.png."""
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job-json", help=argparse.SUPPRESS)
    parser.add_argument("--network", default="ofi", help="MPICH's network layer between hosts: ofi or ucx")
    parser.add_argument("--job-timeout", type=float, default=1800)
    parser.add_argument("--json", default=os.path.join(here, "results", f"{name}.json"))
    parser.add_argument("--plot", nargs="?", const=os.path.join(here, os.pardir, "docs", "benchmarks", f"{name}.png"))
    return parser


def write_json(path, payload):
    """Writes payload to path (rank 0's, in a job; a driver that started no MPI writes it itself)."""
    if not path or (MPI.Is_initialized() and rank() != 0):
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)
    print(f"wrote {path}", flush=True)


def save_figure(fig, path, dpi=110):
    """Writes a matplotlib figure to path (creating its folder) and says so."""
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    print(f"wrote {path}", flush=True)


def verdict(ok):
    return "PASS" if ok else "FAIL"


def targets_record(checks):
    """Prints each check (target, measured, passed) and returns them as the results' JSON list."""
    for text, value, ok in checks:
        print(f"{verdict(ok)}  {text}: {value:.2f}", flush=True)
    return [{"target": text, "measured": round(value, 3), "pass": ok} for text, value, ok in checks]


def format_table(header, rows):
    """A Markdown table (also readable on a terminal)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    def line(cells):
        return "| " + " | ".join(str(c).rjust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def human_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def start_torch_distributed(backend="gloo"):
    """torch.distributed with ``backend`` (gloo, nccl), rendezvous over TCP on this host, ranks as in
    MPI.COMM_WORLD."""
    import socket

    import torch.distributed as dist
    port = 0
    if rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = COMM.bcast(port, root=0)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank(), world_size=size())
    return dist


def run_job_on_hosts(hosts, program, count, per_host, placement, network, timeout, what):
    """Runs program (an argv, to which ``--job-json PATH`` is appended) on count ranks of simulated hosts
    (hvdlite/testing/simulated_hosts.py), per_host a host, started from h1 in the project's root, and returns what its
    rank 0 wrote to PATH. A job that fails or outlasts timeout ends the benchmark with a message naming `what`."""
    import tempfile

    from hvdlite.testing import simulated_hosts
    with tempfile.TemporaryDirectory(prefix="hvdlite-bench-") as folder:
        job_json = os.path.join(folder, "job.json")
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        argv = simulated_hosts.mpiexec_argv(hosts, mpiexec, per_host, placement, [*program, "--job-json", job_json],
                                            env=simulated_hosts.NETWORK_LAYERS[network].items(), count=count)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", HVDLITE_BENCH_LAUNCHED="1")
        process = hosts.popen("h1", argv, env=env, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hosts.kill_processes()
            raise SystemExit(f"{what}: the job did not finish in {timeout} s")
        hosts.kill_processes()
        if code != 0:
            raise SystemExit(f"{what}: the job failed (exit {code})")
        with open(job_json) as stream:
            return json.load(stream)
