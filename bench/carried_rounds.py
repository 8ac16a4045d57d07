"""A backward pass's stream of gradients across simulated hosts, with negotiation rounds carried in the all-reduces
(HVDLITE_CARRIED_ROUNDS=auto, the default across hosts) and without (off): the time of a step and how many of its tensors were negotiated
without a round of their own.

    sudo python bench/carried_rounds.py [--layouts 2x1,4x1] [--rate-mbit 1000] [--plot]

Each step submits a model's gradients one by one in reverse order, as a backward pass makes them, with the
computation between them taken as proportional to their size (--backward-ms for the whole pass), then waits for
all of them (as DistributedOptimizer does in step()). Models: a tiny and a small one of many tensors (where rounds
are a large part of the communication) and one of ResNet-18's size. Each setting needs its own init, so the job alternates
phases (auto, off, auto, off, ...); the ratio is the median over pairs of phases of off / on step time, so slow drift
cancels. After the timed steps of each phase, a few more steps run with rank 0's timeline on, which names each
tensor's negotiation NEGOTIATE_CARRIED or NEGOTIATE: the share carried comes from there (untimed).
"""
import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LAYOUTS = {"2x1": (2, 1), "4x1": (4, 1)}
# (tensors, float32 elements in all): a small model of many tensors, and one of ResNet-18's size (62 tensors).
MODELS = {"tiny": (60, 1 << 16), "small": (60, 1 << 20), "resnet18": (62, 11_220_132)}
MODES = ("auto", "off")  # auto: what a job across hosts does by default


# ---------------------------------------------------------------------------------------------- inside the job
def tensor_sizes(count, total):
    """Sizes like a convolutional network's: growing along the network, so the first gradients of the backward pass
    (the last layers') are the largest."""
    weights = [1.0 + 8.0 * (i / max(1, count - 1)) ** 2 for i in range(count)]
    scale = total / sum(weights)
    return [max(1, int(w * scale)) for w in weights]


def run_job(args):
    import numpy as np

    from common import COMM, MPI, median

    import hvdlite as hvd

    tensors, total = MODELS[args.model]
    sizes = tensor_sizes(tensors, total)
    per_element = args.backward_ms / 1e3 / sum(sizes)
    gradients = [np.full(n, COMM.Get_rank() + 1, dtype=np.float32) for n in sizes]
    expected = np.float32(COMM.Get_size() * (COMM.Get_size() + 1) / 2)

    def step():
        handles = []
        for i in reversed(range(tensors)):  # the last layer's gradient first
            deadline = time.perf_counter() + sizes[i] * per_element
            while time.perf_counter() < deadline:  # the backward pass computing the next gradient
                pass
            handles.append(hvd.allreduce_async(gradients[i], name=f"grad.{i}", op=hvd.Sum))
        outputs = [hvd.synchronize(h) for h in handles]
        if not all(np.all(out == expected) for out in outputs):
            raise SystemExit("wrong all-reduce result")

    results = {"model": args.model, "sizes": sizes, "phases": []}
    trace = os.path.join(tempfile.gettempdir(), f"hvdlite-carried-{os.getpid()}.json")
    for phase in range(2 * args.pairs):
        mode = MODES[phase % 2]
        os.environ["HVDLITE_CARRIED_ROUNDS"] = mode
        hvd.init()
        for _ in range(args.warmup):
            step()
        times = []
        for _ in range(args.steps):
            COMM.Barrier()
            start = time.perf_counter()
            step()
            times.append(COMM.allreduce(time.perf_counter() - start, op=MPI.MAX))
        hvd.start_timeline(trace)
        for _ in range(3):
            step()
        hvd.stop_timeline()
        carried = separate = 0
        if COMM.Get_rank() == 0:
            with open(trace) as stream:
                names = [e["name"] for e in json.load(stream) if e.get("ph") == "X"]
            carried, separate = names.count("NEGOTIATE_CARRIED"), names.count("NEGOTIATE")
            os.unlink(trace)
        hvd.shutdown()
        results["phases"].append({"mode": mode, "step_s": median(times), "carried": carried, "separate": separate})
        if COMM.Get_rank() == 0:
            print(f"  {args.model} {mode:>3}: step {median(times) * 1e3:8.2f} ms, tensors negotiated in a carried "
                  f"round {carried} of {carried + separate}", flush=True)
    if COMM.Get_rank() == 0:
        with open(args.job_json, "w") as stream:
            json.dump(results, stream)


# ---------------------------------------------------------------------------------------------- the driver
def run_layout(hosts, layout, model, args):
    import common
    count, per_host = LAYOUTS[layout]
    program = [sys.executable, os.path.abspath(__file__), "--job", "--model", model, "--pairs", str(args.pairs),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--backward-ms", str(args.backward_ms)]
    return common.run_job_on_hosts(hosts, program, count, per_host, "blocks", args.network, args.job_timeout,
                                   f"{layout} {model}")


def summarise(layout, job):
    from common import median
    on = [p for p in job["phases"] if p["mode"] == MODES[0]]
    off = [p for p in job["phases"] if p["mode"] == "off"]
    ratios = [b["step_s"] / a["step_s"] for a, b in zip(on, off)]
    share = lambda phases: sum(p["carried"] for p in phases) / max(1, sum(p["carried"] + p["separate"] for p in phases))
    return {"layout": layout, "model": job["model"], "tensors": len(job["sizes"]), "elements": sum(job["sizes"]),
            "step_on_ms": median([p["step_s"] for p in on]) * 1e3, "step_off_ms": median([p["step_s"] for p in off]) * 1e3,
            "off_over_on": median(ratios), "pair_ratios": [round(r, 3) for r in ratios],
            "carried_share_on": share(on), "carried_share_off": share(off)}


def table(rows):
    import common
    header = ["layout", "model (tensors, MB)", "step ms carried", "step ms not", "not / carried (pairs)",
              "share of tensors carried"]
    body = [[r["layout"], f"{r['model']} ({r['tensors']}, {r['elements'] * 4 / 1e6:.1f})", f"{r['step_on_ms']:.2f}",
             f"{r['step_off_ms']:.2f}", f"{r['off_over_on']:.3f} ({', '.join(f'{x:.2f}' for x in r['pair_ratios'])})",
             f"{r['carried_share_on']:.2f} (off: {r['carried_share_off']:.2f})"] for r in rows]
    return common.format_table(header, body)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import common
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{r['layout']} {r['model']}" for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["step_on_ms"] for r in rows], 0.4, label="rounds carried")
    ax.bar([x + 0.2 for x in xs], [r["step_off_ms"] for r in rows], 0.4, label="a round of their own")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("step ms (median)")
    ax.set_yscale("log")
    ax.set_title("A backward pass's gradients across simulated hosts, 1 Gbit/s")
    ax.legend()
    common.save_figure(fig, path)


def main():
    import mpi4py
    mpi4py.rc.initialize = "--job" in sys.argv  # the driver only launches jobs
    import common
    parser = common.hosts_driver_arguments(__doc__, "carried_rounds")
    parser.add_argument("--model", default="small", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--rate-mbit", type=int, default=1000, help="each host link's rate; 0 unshaped")
    parser.add_argument("--pairs", type=int, default=3, help="phases with rounds carried and not, alternating")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per phase")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--backward-ms", type=float, default=30.0, help="computation of the whole backward pass")
    args = parser.parse_args()
    if args.job:
        return run_job(args)
    from hvdlite.testing.simulated_hosts import hosts_for_bench
    rows, started = [], time.time()
    layouts = args.layouts.split(",")
    with hosts_for_bench(max(LAYOUTS[l][0] for l in layouts), "bench/carried_rounds.py",
                         rate_mbit=args.rate_mbit or None) as hosts:
        for layout in layouts:
            for model in args.models.split(","):
                print(f"-- {layout} {model}", flush=True)
                rows.append(summarise(layout, run_layout(hosts, layout, model, args)))
    print(table(rows))
    payload = {"benchmark": "carried_rounds", "rate_mbit": args.rate_mbit, "network": args.network,
               "backward_ms": args.backward_ms, "rows": rows, "table": table(rows),
               "machine": common.driver_machine(started)}
    common.write_json(args.json, payload)
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
