"""float32 all-reduce from 4 B to 256 MiB: hvdlite (ring, MPI, direct, auto) against MPI_Allreduce and gloo.

    OMP_NUM_THREADS=1 mpiexec -n 2 python bench/allreduce.py [--plot] [--json PATH]

hvdlite goes through its full public path every iteration: a request is enqueued, negotiated by the
background thread (steady state: the response cache's bit-vector round), reduced, and synchronized from
Python. Two flavours are timed: `hvd.allreduce_async` + `hvd.synchronize` (the numpy API, which allocates
its output every call like any function returning a new array), and the pointer-level
`hvdlite.requests.submit` + `Handle.wait` into a preallocated output, which is what the framework adapters
use and what mpi4py's `Allreduce(send, recv)` and gloo's in-place `all_reduce` do. The algorithm columns
(ring, mpi, direct, auto) use the latter. Each hvdlite algorithm needs its own init, so the run has one phase per
algorithm, and MPI and gloo are timed again, interleaved, in each phase; ratios pair rounds of one phase.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import COMM, MPI, human_bytes, median, median_ratio, say, verdict  # noqa: E402

import hvdlite as hvd  # noqa: E402
from hvdlite.requests import Collective, Request, submit  # noqa: E402

ALGORITHMS = ("ring", "mpi", "direct", "auto")
SIZES = [4 * 4 ** k for k in range(14)]  # 4 B .. 256 MiB
LARGE = 1 << 20
SMALL = 4096
TARGET_LARGE_VS_MPI = 0.95
TARGET_LARGE_VS_GLOO = 1.3
TARGET_SMALL_LATENCY = 4.0


def hvd_preallocated(x, out, name):
    request = Request(Collective.ALLREDUCE, name, "float32", x.shape, x.ctypes.data, out.ctypes.data, op=hvd.Sum,
                      keepalive=(x, out))

    def run():
        handle = submit(request)
        handle.wait()
        handle.release()
    return run


def hvd_numpy(x, name):
    def run():
        hvd.synchronize(hvd.allreduce_async(x, name=name, op=hvd.Sum))
    return run


def check(result, expected, what):
    if not np.array_equal(result, expected):
        raise SystemExit(f"{what}: wrong all-reduce result")


def measure_size(nbytes, algorithm, dist, torch, args):
    n = nbytes // 4
    rank, nranks = common.rank(), common.size()
    x = np.full(n, rank + 1, dtype=np.float32)
    expected = np.full(n, nranks * (nranks + 1) / 2, dtype=np.float32)
    out_hvd, out_mpi = np.empty_like(x), np.empty_like(x)
    gloo_buffer = x.copy()
    gloo_tensor = torch.from_numpy(gloo_buffer)
    name = f"bench.{nbytes}"
    methods = {
        "hvd": hvd_preallocated(x, out_hvd, name),
        "mpi": lambda: COMM.Allreduce(x, out_mpi, MPI.SUM),
        "gloo": lambda: dist.all_reduce(gloo_tensor),
    }
    if algorithm == "auto":
        methods["hvd_numpy"] = hvd_numpy(x, name + ".np")
    # Correctness first (one call each), then the timed rounds.
    methods["hvd"]()
    check(out_hvd, expected, f"hvdlite {algorithm} {nbytes} B")
    methods["mpi"]()
    check(out_mpi, expected, f"MPI {nbytes} B")
    methods["gloo"]()
    check(gloo_buffer, expected, f"gloo {nbytes} B")
    gloo_buffer[:] = 0  # later in-place iterations keep it finite
    budget = args.budget * (2 if nbytes <= SMALL else 1)
    return common.interleaved(methods, args.repeats, budget)


def summarise(results, nranks):
    """Per size: latency and bandwidths of every method, ratios of every algorithm to MPI and gloo."""
    rows = []
    for nbytes in sorted(results):
        by_algorithm = results[nbytes]
        mpi_all = [t for a in by_algorithm.values() for t in a["mpi"]]
        gloo_all = [t for a in by_algorithm.values() for t in a["gloo"]]
        row = {"bytes": nbytes, "methods": {}, "ratios": {}}

        def describe(seconds):
            t = median(seconds)
            algbw = nbytes / t / 1e9
            return {"latency_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (nranks - 1) / nranks,
                    "rounds_us": [s * 1e6 for s in seconds]}
        row["methods"]["mpi"] = describe(mpi_all)
        row["methods"]["gloo"] = describe(gloo_all)
        for algorithm, rounds in by_algorithm.items():
            row["methods"][algorithm] = describe(rounds["hvd"])
            row["ratios"][algorithm] = {
                # bandwidth ratios (>1: hvdlite faster) and the latency ratio (hvdlite time / MPI time)
                "bw_vs_mpi": median_ratio(rounds["mpi"], rounds["hvd"]),
                "bw_vs_gloo": median_ratio(rounds["gloo"], rounds["hvd"]),
                "latency_vs_mpi": median_ratio(rounds["hvd"], rounds["mpi"]),
            }
            if "hvd_numpy" in rounds:
                row["methods"]["auto_numpy"] = describe(rounds["hvd_numpy"])
                row["ratios"]["auto_numpy"] = {
                    "bw_vs_mpi": median_ratio(rounds["mpi"], rounds["hvd_numpy"]),
                    "bw_vs_gloo": median_ratio(rounds["gloo"], rounds["hvd_numpy"]),
                    "latency_vs_mpi": median_ratio(rounds["hvd_numpy"], rounds["mpi"]),
                }
        rows.append(row)
    return rows


def targets(rows):
    checks = []
    for row in rows:
        r = row["ratios"]["auto"]
        if row["bytes"] >= LARGE:
            checks.append({"target": f"auto bandwidth >= {TARGET_LARGE_VS_MPI}x MPI_Allreduce at {human_bytes(row['bytes'])}",
                           "measured": round(r["bw_vs_mpi"], 3), "pass": r["bw_vs_mpi"] >= TARGET_LARGE_VS_MPI})
            checks.append({"target": f"auto bandwidth >= {TARGET_LARGE_VS_GLOO}x gloo at {human_bytes(row['bytes'])}",
                           "measured": round(r["bw_vs_gloo"], 3), "pass": r["bw_vs_gloo"] >= TARGET_LARGE_VS_GLOO})
        if row["bytes"] == SMALL:
            for flavour in ("auto", "auto_numpy"):
                ratio = row["ratios"][flavour]["latency_vs_mpi"]
                checks.append({"target": f"{flavour} latency at 4 KiB <= {TARGET_SMALL_LATENCY}x MPI_Allreduce",
                               "measured": round(ratio, 2), "pass": ratio <= TARGET_SMALL_LATENCY})
    return checks


def print_tables(rows, checks):
    header = ["size", "MPI us", "gloo us", "ring us", "mpi us", "direct us", "auto us", "auto(np) us",
              "auto algbw GB/s", "auto busbw GB/s", "MPI busbw", "gloo busbw", "ring/MPI", "mpi/MPI", "direct/MPI",
              "auto/MPI", "auto/gloo"]
    table = []
    for row in rows:
        m, r = row["methods"], row["ratios"]
        table.append([human_bytes(row["bytes"]), f"{m['mpi']['latency_us']:.1f}", f"{m['gloo']['latency_us']:.1f}",
                      f"{m['ring']['latency_us']:.1f}", f"{m['mpi_alg']['latency_us']:.1f}",
                      f"{m['direct']['latency_us']:.1f}", f"{m['auto']['latency_us']:.1f}",
                      f"{m['auto_numpy']['latency_us']:.1f}",
                      f"{m['auto']['algbw_GBps']:.3f}", f"{m['auto']['busbw_GBps']:.3f}",
                      f"{m['mpi']['busbw_GBps']:.3f}", f"{m['gloo']['busbw_GBps']:.3f}",
                      f"{r['ring']['bw_vs_mpi']:.2f}", f"{r['mpi_alg']['bw_vs_mpi']:.2f}",
                      f"{r['direct']['bw_vs_mpi']:.2f}",
                      f"{r['auto']['bw_vs_mpi']:.2f}", f"{r['auto']['bw_vs_gloo']:.2f}"])
    text = common.format_table(header, table)
    text += "\n\n" + common.format_table(["target", "measured", "result"],
                                          [[c["target"], c["measured"], verdict(c["pass"])] for c in checks])
    return text


def plot(rows, path, nranks=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [row["bytes"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = {"mpi": "MPI_Allreduce (mpi4py)", "gloo": "gloo (torch.distributed)", "ring": "hvdlite ring",
              "mpi_alg": "hvdlite mpi", "direct": "hvdlite direct", "auto": "hvdlite auto",
              "auto_numpy": "hvdlite auto, numpy API"}
    for key, label in labels.items():
        if key not in rows[0]["methods"]:
            continue
        style = "--" if key in ("mpi", "gloo") else "-"
        left.plot(sizes, [r["methods"][key]["latency_us"] for r in rows], style, marker=".", label=label)
        right.plot(sizes, [r["methods"][key]["busbw_GBps"] for r in rows], style, marker=".", label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("latency (us, median)")
    right.set_ylabel("bus bandwidth (GB/s)")
    right.legend(fontsize=8)
    fig.suptitle(f"float32 all-reduce, {nranks or common.size()} ranks")
    common.save_figure(fig, path)


def main():
    common.relaunch_under_mpiexec()
    parser = common.base_arguments(__doc__.splitlines()[0], "allreduce")
    parser.add_argument("--max-bytes", type=int, default=SIZES[-1])
    args = parser.parse_args()
    sizes = [s for s in SIZES if s <= args.max_bytes]
    if args.quick:
        args.repeats = min(args.repeats, 3)
        sizes = [s for s in sizes if s in (4, 4096, 1 << 20, 4 << 20, 16 << 20)]
    import torch
    dist = common.start_torch_distributed("gloo")
    results = {s: {} for s in sizes}
    for algorithm in ALGORITHMS:
        os.environ["HVDLITE_ALLREDUCE_ALGORITHM"] = algorithm
        hvd.init()
        say(f"-- hvdlite algorithm {algorithm}")
        key = "mpi_alg" if algorithm == "mpi" else algorithm
        for nbytes in sizes:
            results[nbytes][key] = measure_size(nbytes, algorithm, dist, torch, args)
            r = results[nbytes][key]
            say(f"{human_bytes(nbytes):>9}: hvdlite {median(r['hvd']) * 1e6:10.1f} us   MPI {median(r['mpi']) * 1e6:10.1f}"
                f" us   gloo {median(r['gloo']) * 1e6:10.1f} us   bw/MPI {median_ratio(r['mpi'], r['hvd']):.2f}")
        hvd.shutdown()
    rows = summarise(results, common.size())
    checks = targets(rows)
    text = print_tables(rows, checks)
    say("\n" + text)
    settings = {k: v for k, v in hvd.config.resolve().items() if k in ("ring_segment_bytes", "auto_ring_min_bytes",
                                                                        "fusion_threshold_bytes", "cycle_time_ms")}
    common.write_json(args.json, {"benchmark": "allreduce", "machine": common.machine_info(), "settings": settings,
                                  "repeats": args.repeats, "rows": rows, "targets": checks, "table": text})
    if args.plot and common.rank() == 0:
        plot(rows, args.plot)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
