"""Tensor fusion: N small all-reduces submitted async then synchronized, against one all-reduce of the same
total bytes, and against the same N tensors with fusion disabled.

    python bench/fusion.py [--launches 5] [--count 256] [--kib 16] [--plot] [--json PATH]
    OMP_NUM_THREADS=1 mpiexec -n 2 python bench/fusion.py ...     # one launch: this job only

Run as plain `python`, it makes --launches separate jobs (each relaunches itself under mpiexec with its ranks bound)
and reports the median over them of each job's medians, with the spread: on this VM the time of the one all-reduce
moves between launches (0.32-0.50 ms), not within one, and the ratios with it.

"many" is what a training step does with its gradients: every tensor is submitted at once
(`hvd.allreduce_async`, or the pointer-level `PreparedRequest.submit` that the torch optimizer uses), then all are
synchronized; the background thread negotiates and fuses them into as few all-reduces as the fusion threshold
allows. "grouped" submits the same N all-reduces in one call (`hvd.grouped_allreduce_async`, or the pointer-level
`PreparedGroup`, filled once and submitted every step): the per-tensor Python calls go. The torch rows make the
same calls through `hvdlite.torch` on CPU tensors (no target: shown for the cost of torch's tensor-to-array view). "grouped_views" does so
with N views of one array that starts 8 bytes past a page, into views of another such array: every tensor lies
8 bytes off its place in the page-aligned staging buffer, the distance at which glibc's memcpy (rep movsb, on
AMD) ran 13-20x slower before the core copied tensors with vectors (3.29x one all-reduce then, 1.27x after);
adjacent on both sides, the views are now streamed as one run.
"one" is a single all-reduce of count x kib KiB through the same pointer-level path. The unfused run needs its
own init (HVDLITE_FUSION_THRESHOLD=0); "one" is timed again, interleaved, in that phase so that its ratio pairs
rounds of one phase.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import COMM, MPI, human_bytes, median, median_ratio, say, verdict  # noqa: E402

import hvdlite as hvd  # noqa: E402
from hvdlite.requests import Collective, PreparedGroup, PreparedRequest, Request  # noqa: E402

TARGET = 1.5


def request(x, out, name):
    return Request(Collective.ALLREDUCE, name, "float32", x.shape, x.ctypes.data, out.ctypes.data, op=hvd.Sum,
                   keepalive=(x, out))


def methods_for(count, elements, fused):
    rank = common.rank()
    xs = [np.full(elements, rank + 1 + i % 7, dtype=np.float32) for i in range(count)]
    outs = [np.empty_like(x) for x in xs]
    requests = [request(x, out, f"fusion.{i}") for i, (x, out) in enumerate(zip(xs, outs))]
    big = np.full(count * elements, rank + 1, dtype=np.float32)
    big_out = np.empty_like(big)
    big_request = PreparedRequest(request(big, big_out, "fusion.one"))
    big_keep = (big, big_out)
    mpi_out = np.empty_like(big)

    # As the torch optimizer submits each gradient: a request prepared once, given its buffers every step.
    prepared_each = [(PreparedRequest(r), r.input_ptr, r.output_ptr, r.keepalive) for r in requests]

    def many():
        handles = [p.submit(x, out, keep) for p, x, out, keep in prepared_each]
        for h in handles:
            h.finish()  # wait() and release() in one call, as the optimizer finishes each gradient

    names = [f"fusion.np.{i}" for i in range(count)]  # made once, as a training loop names its parameters

    def many_numpy():
        handles = [hvd.allreduce_async(x, name=name, op=hvd.Sum) for name, x in zip(names, xs)]
        for h in handles:
            hvd.synchronize(h)

    # The same through hvdlite.torch, as a training loop of Horovod's torch API reduces each gradient: CPU tensors
    # (zeros, so that reducing them in place step after step keeps them finite).
    import torch
    import hvdlite.torch as hvd_torch
    tensors = [torch.zeros(elements) for _ in range(count)]
    torch_names = [f"fusion.torch.{i}" for i in range(count)]

    def many_torch():
        handles = [hvd_torch.allreduce_async(t, name=name, op=hvd_torch.Sum) for name, t in zip(torch_names, tensors)]
        for h in handles:
            hvd_torch.synchronize(h)

    def many_torch_in_place():
        handles = [hvd_torch.allreduce_async_(t, name=name, op=hvd_torch.Sum)
                   for name, t in zip(torch_names, tensors)]
        for h in handles:
            hvd_torch.synchronize(h)

    prepared = PreparedGroup(requests)
    def views_past_a_page():  # count views of one array that starts 8 bytes past a page
        page_floats = 1024
        flat = np.empty(count * elements + 2 * page_floats, dtype=np.float32)
        start = (-(flat.ctypes.data // 4)) % page_floats + 2
        return [flat[start + i * elements: start + (i + 1) * elements] for i in range(count)]

    views, view_outs = views_past_a_page(), views_past_a_page()
    for i, view in enumerate(views):
        view.fill(rank + 1 + i % 7)
    prepared_views = PreparedGroup([request(v, o, f"fusion.view.{i}") for i, (v, o) in enumerate(zip(views, view_outs))])

    def grouped_views():
        group = prepared_views.submit()
        group.wait()
        group.release()

    def grouped():
        group = prepared.submit()
        group.wait()
        group.release()

    def grouped_numpy():
        return hvd.synchronize(hvd.grouped_allreduce_async(xs, name="fusion.group", op=hvd.Sum))

    def one():  # prepared too, as each of the many: the baseline pays no request-building either
        h = big_request.submit(big, big_out, big_keep)
        h.wait()
        h.release()

    expected = [np.full(elements, sum(r + 1 + i % 7 for r in range(common.size())), dtype=np.float32)
                for i in range(count)]
    for variant, results in ((many, outs), (grouped, outs), (grouped_views, view_outs)) if fused else ((many, outs),):
        for out in results:
            out.fill(0)
        variant()
        if not all(np.array_equal(o, e) for o, e in zip(results, expected)):
            raise SystemExit(f"fusion: wrong all-reduce result ({variant.__name__})")
    if fused and not all(np.array_equal(o, e) for o, e in zip(grouped_numpy(), expected)):
        raise SystemExit("fusion: wrong all-reduce result (grouped_numpy)")
    if fused:
        return {"many": many, "many_numpy": many_numpy, "many_torch": many_torch,
                "many_torch_in_place": many_torch_in_place, "grouped": grouped, "grouped_numpy": grouped_numpy,
                "grouped_views": grouped_views, "one": one,
                "mpi_one": lambda: COMM.Allreduce(big, mpi_out, MPI.SUM)}
    return {"many_unfused": many, "one": one}


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = ["one all-reduce\n(same bytes)", "N async,\nfused", "N async, fused\n(numpy API)", "N async, fused\n(torch)",
              "N async, fused\n(torch, in place)", "N grouped,\nfused",
              "N grouped, fused\n(numpy API)", "N grouped, views\n8 B past a page", "N async,\nfusion off", "MPI_Allreduce\n(same bytes)"]
    keys = ["one", "many", "many_numpy", "many_torch", "many_torch_in_place", "grouped", "grouped_numpy",
            "grouped_views", "many_unfused", "mpi_one"]
    values = [result["times_ms"][k] for k in keys]
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.bar(labels, values, color=["#777", "#1f77b4", "#6baed6", "#9467bd", "#c5b0d5", "#2ca02c", "#98df8a", "#bcbd22",
                                  "#d62728", "#aaa"])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("ms (median)")
    ranks = result.get("machine", {}).get("ranks", common.size())
    ax.set_title(f"{result['count']} x {human_bytes(result['bytes_each'])} all-reduces, {ranks} ranks")
    common.save_figure(fig, path)


# (key, table label, ratio key or None) for each variant, in table order.
VARIANTS = [
    ("one", "one all-reduce of the same bytes", None),
    ("many", "N async, fused (pointer-level submit)", "many_vs_one"),
    ("many_numpy", "N async, fused (numpy API)", "many_numpy_vs_one"),
    ("many_torch", "N async, fused (hvdlite.torch allreduce_async)", "many_torch_vs_one"),
    ("many_torch_in_place", "N async, fused (hvdlite.torch allreduce_async_, in place)", "many_torch_in_place_vs_one"),
    ("grouped", "N in one call, fused (pointer-level PreparedGroup)", "grouped_vs_one"),
    ("grouped_numpy", "N in one call, fused (hvd.grouped_allreduce_async)", "grouped_numpy_vs_one"),
    ("grouped_views", "N in one call, views of one array 8 B past a page (PreparedGroup)", "grouped_views_vs_one"),
    ("many_unfused", "N async, fusion disabled", "unfused_vs_one"),
    ("mpi_one", "MPI_Allreduce of the same bytes (mpi4py)", "mpi_vs_one"),
]


def checks_for(count, bytes_each, ratios):
    """The targets, each against the ratio given (one launch's, or the median over launches)."""
    targets = [("many_vs_one", f"{count} x {human_bytes(bytes_each)} async (pointer-level) <= {TARGET}x one "
                               f"{human_bytes(count * bytes_each)} all-reduce"),
               ("many_numpy_vs_one", f"same through the numpy API (hvd.allreduce_async) <= {TARGET}x"),
               ("grouped_vs_one", f"same submitted in one call (pointer-level PreparedGroup) <= {TARGET}x"),
               ("grouped_numpy_vs_one", f"same through hvd.grouped_allreduce_async <= {TARGET}x")]
    return [{"target": text, "ratio": key, "measured": round(ratios[key], 2), "pass": ratios[key] <= TARGET}
            for key, text in targets]


def tables(times, ratios, checks, ranges=None):
    """The variants table and the targets table; ranges ({ratio key: (low, high)}) adds each ratio's spread
    over launches."""
    def spread(ratio_key):  # the range column, when there is one
        if not ranges:
            return []
        return [f"{ranges[ratio_key][0]:.2f}-{ranges[ratio_key][1]:.2f}" if ratio_key else ""]

    header = ["variant", "ms (median)", "x one all-reduce"] + (["range over launches"] if ranges else [])
    rows = [[label, f"{times[key]:.2f}", f"{ratios[ratio_key]:.2f}" if ratio_key else "1.00"] + spread(ratio_key)
            for key, label, ratio_key in VARIANTS]
    target_header = ["target", "measured"] + (["range over launches"] if ranges else []) + ["result"]
    target_rows = [[c["target"], c["measured"]] + spread(c["ratio"]) + [verdict(c["pass"])] for c in checks]
    return common.format_table(header, rows) + "\n\n" + common.format_table(target_header, target_rows)


def measure(args):
    """One launch: every variant timed in interleaved rounds, fused then unfused (their own init)."""
    elements = args.kib * 1024 // 4
    budget = max(args.budget, 0.2)
    # The fused phase names 5 x count tensors and the one (five variants' own names, interleaved): more than the
    # default 1024 entries of the response cache, which would then evict each variant while the others run and
    # send every batch's first step down the slow negotiation path. A model with that many tensors gets the
    # same advice: a cache that holds them all (HVDLITE_CACHE_CAPACITY).
    os.environ.setdefault("HVDLITE_CACHE_CAPACITY", str(1 << (5 * args.count + 1).bit_length()))
    os.environ.pop("HVDLITE_FUSION_THRESHOLD", None)
    hvd.init()
    fused = common.interleaved(methods_for(args.count, elements, True), args.repeats, budget)
    hvd.shutdown()
    os.environ["HVDLITE_FUSION_THRESHOLD"] = "0"
    hvd.init()
    unfused = common.interleaved(methods_for(args.count, elements, False), args.repeats, budget)
    hvd.shutdown()
    os.environ.pop("HVDLITE_FUSION_THRESHOLD")
    rounds = dict(fused, many_unfused=unfused["many_unfused"])
    times = {k: median(v) * 1e3 for k, v in rounds.items()}
    ratios = {ratio_key: median_ratio(rounds[key], (unfused if key == "many_unfused" else fused)["one"])
              for key, _, ratio_key in VARIANTS if ratio_key}
    checks = checks_for(args.count, elements * 4, ratios)
    text = tables(times, ratios, checks)
    say(f"\n{args.count} x {human_bytes(elements * 4)} float32, {common.size()} ranks\n" + text)
    return {"benchmark": "fusion", "machine": common.machine_info(), "count": args.count, "bytes_each": elements * 4,
            "repeats": args.repeats, "launches": 1, "cache_capacity": int(os.environ["HVDLITE_CACHE_CAPACITY"]),
            "times_ms": times, "ratios": ratios, "targets": checks,
            "table": text, "rounds_ms": {k: [t * 1e3 for t in v] for k, v in rounds.items()}}


def over_launches(args):
    """args.launches separate jobs (each its own mpiexec, so its own memory placement: the one all-reduce's
    time moves between launches, not within one); every figure is the median of the launches' medians."""
    runs = common.separate_launches(os.path.abspath(__file__), args.launches,
                                    ["--count", str(args.count), "--kib", str(args.kib), "--repeats", str(args.repeats),
                                     "--budget", str(args.budget)] + (["--quick"] if args.quick else []))
    times = {key: median([run["times_ms"][key] for run in runs]) for key, _, _ in VARIANTS}
    per_launch = {ratio_key: [run["ratios"][ratio_key] for run in runs] for _, _, ratio_key in VARIANTS if ratio_key}
    ratios = {k: median(v) for k, v in per_launch.items()}
    ranges = {k: (min(v), max(v)) for k, v in per_launch.items()}
    checks = checks_for(args.count, runs[0]["bytes_each"], ratios)
    for check in checks:
        check["launches"] = [round(r, 3) for r in per_launch[check["ratio"]]]
    text = tables(times, ratios, checks, ranges)
    print(f"\n{args.count} x {human_bytes(runs[0]['bytes_each'])} float32, {runs[0]['machine']['ranks']} ranks, "
          f"median of {args.launches} launches\n" + text, flush=True)
    machine = common.launches_machine(runs)
    return {"benchmark": "fusion", "machine": machine, "count": args.count, "bytes_each": runs[0]["bytes_each"],
            "repeats": args.repeats, "launches": args.launches, "cache_capacity": runs[0]["cache_capacity"],
            "times_ms": times, "ratios": ratios,
            "ratio_ranges": ranges, "targets": checks, "table": text,
            "per_launch": [{k: run[k] for k in ("times_ms", "ratios", "rounds_ms")}
                           | {"load_average": run["machine"]["load_average"], "date": run["machine"]["date"]}
                           for run in runs]}


def main():
    parser = common.base_arguments(__doc__.splitlines()[0], "fusion")
    common.add_launch_arguments(parser, launches=5)
    args = parser.parse_args()
    result = common.run_launches(args, over_launches, measure)
    if args.plot and common.rank() == 0:
        plot(result, args.plot)

if __name__ == "__main__":
    main()
