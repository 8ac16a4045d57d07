"""hvdlite against the number of hosts: 2 to 32 simulated hosts with one rank each, every figure beside MPI's own
in the same job.

    sudo python bench/scale.py [--hosts 2,4,8,16,32] [--rate-mbit 1000] [--quick] [--plot]

Per host count h, in one job of h ranks (hvdlite/testing/simulated_hosts.py: network namespaces on this machine,
TCP through a bridge, each host link shaped with tc tbf; needs root):
- the negotiation round: a synchronous all-reduce of an empty tensor with eager values and carried rounds off,
  which exchanges nothing but the round (across hosts: within each host over MPI, then the bits gathered around the
  ring's TCP connections, or ANDed in log2(h) steps at doubling distances: each way, forced, in turn, and the table's
  round is the one the default takes at h), beside `MPI_Allreduce` of one 8-byte word, the round's size class over
  MPI;
- 4 KiB, 256 KiB (the smallest the ring across hosts takes) and 1 MiB float32 all-reduces (default settings) beside mpi4py's `Allreduce`, interleaved rounds
  (bench/common.py), the ratio the median of paired rounds;
- start-up: from the driver starting mpiexec to every rank's first all-reduce done (the slowest rank), and from
  `hvd.init()` to it (the native parts imported before: an editable install checks its build there, one rank at a
  time), beside MPI's own start-up collectives (a communicator duplicated and split by host and across hosts, the
  ranks' addresses gathered, a first all-reduce) timed in the same processes;
- resident memory per rank (VmRSS after the timed phases; the median and largest over ranks), and what hvdlite
  adds to a process that has imported it (RSS after minus RSS before `hvd.init()`).

On one machine every host shares its cores: with 2 cores, 32 ranks are 16 to a core, so times at many hosts
measure the scheduler as much as the algorithms. The ratios to MPI, measured side by side in the same processes,
are the figures that carry over; the round's growth is fitted against log2(h) and against h, and compared with
MPI's all-reduce of a word (recursive doubling, log2(h) steps) in the same processes.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

HOSTS = (2, 4, 8, 16, 32)
SIZES = {"4 KiB": 4096, "256 KiB": 256 << 10, "1 MiB": 1 << 20}
TARGET_RATIO = 1.2          # all-reduce time / MPI_Allreduce time, at most, at every h
TARGET_FLAT = 1.2           # growth over h, at most: memory per rank, and the round and start-up against MPI's
# The round's step across hosts, each way forced (HVDLITE_ROUND_DOUBLING_MIN_HOSTS).
ROUND_WAYS = {"ring": "100000", "doubling": "2"}


def default_round_way(hosts):
    from hvdlite.config import SETTINGS_BY_NAME
    return "doubling" if hosts >= SETTINGS_BY_NAME["round_doubling_min_hosts"].default else "ring"


# ---------------------------------------------------------------------------------------------- inside the job
def rss_kib():
    with open("/proc/self/status") as stream:
        return next(int(line.split()[1]) for line in stream if line.startswith("VmRSS:"))


def side_by_side(rounds):
    """hvdlite's and MPI's median times of interleaved rounds, and the median of their paired ratios."""
    from common import median, median_ratio
    return {"hvd_s": median(rounds["hvd"]), "mpi_s": median(rounds["mpi"]),
            "hvd_over_mpi": median_ratio(rounds["hvd"], rounds["mpi"])}


def mpi_startup(comm, MPI):
    """What any MPI library's start-up does, timed in the same processes after hvdlite's (so MPI's connections
    made by then favour it): a communicator of its own, split by host and across hosts, every rank's address
    gathered, and a first all-reduce (Horovod's init does these). The slowest rank's seconds."""
    import socket

    import numpy as np
    comm.Barrier()
    started = time.perf_counter()
    own = comm.Dup()
    local = own.Split_type(MPI.COMM_TYPE_SHARED)
    cross = own.Split(local.Get_rank(), own.Get_rank())
    own.allgather(socket.gethostname())
    one, out = np.ones(1, np.float32), np.empty(1, np.float32)
    own.Allreduce(one, out, MPI.SUM)
    elapsed = time.perf_counter() - started
    for made in (cross, local, own):
        made.Free()
    return comm.allreduce(elapsed, op=MPI.MAX)


def run_job(args):
    import numpy as np

    import common
    from common import COMM, MPI, median

    import hvdlite as hvd

    # The native parts loaded before the clock starts: in an editable install their first import checks the build,
    # one rank at a time under a file lock (seconds at many ranks on 2 cores), which a wheel's user never pays.
    import hvdlite._tensor_calls  # noqa: F401

    results = {"ranks": COMM.Get_size()}
    before_init = rss_kib()
    COMM.Barrier()  # every rank here (they import one at a time in an editable install): init's own time from here
    started = time.perf_counter()
    hvd.init()
    hvd.allreduce(np.ones(1, np.float32), name="first", op=hvd.Sum)
    first_done = time.time()
    results["init_to_first_s"] = COMM.allreduce(time.perf_counter() - started, op=MPI.MAX)
    results["launch_to_first_s"] = COMM.allreduce(first_done - args.launched_at, op=MPI.MAX)
    results["mpi_startup_s"] = mpi_startup(COMM, MPI)
    for label, nbytes in SIZES.items():
        x = np.full(nbytes // 4, hvd.rank() + 1, dtype=np.float32)
        expected = np.float32(hvd.size() * (hvd.size() + 1) / 2)
        out = np.empty_like(x)
        methods = {"hvd": lambda: hvd.allreduce(x, name=f"scale.{label}", op=hvd.Sum),
                   "mpi": lambda: COMM.Allreduce(x, out, MPI.SUM)}
        if not np.all(methods["hvd"]() == expected):
            raise SystemExit(f"hvdlite {label}: wrong all-reduce result")
        rounds = common.interleaved(methods, args.repeats, args.budget, warmup=2)
        results[label] = side_by_side(rounds)
        common.say(f"  {label}: hvdlite {results[label]['hvd_s'] * 1e3:.3f} ms, MPI "
                   f"{results[label]['mpi_s'] * 1e3:.3f} ms, ratio {results[label]['hvd_over_mpi']:.2f}")
    rss = rss_kib()
    added = COMM.allgather(rss - before_init)
    everyone = COMM.allgather(rss)
    results["rss_kib_median"] = median(everyone)
    results["rss_kib_max"] = max(everyone)
    results["added_kib_median"] = median(added)
    hvd.shutdown()

    # The round alone: nothing else rides in it, and an empty tensor moves no data. Each way across hosts in turn.
    os.environ.update(HVDLITE_EAGER_MAX_BYTES="0", HVDLITE_CARRIED_ROUNDS="off")
    empty, word, word_out = np.empty(0, np.float32), np.zeros(1, np.uint64), np.zeros(1, np.uint64)
    results["round_by"] = {}
    for way, min_hosts in ROUND_WAYS.items():
        os.environ["HVDLITE_ROUND_DOUBLING_MIN_HOSTS"] = min_hosts
        hvd.init()
        methods = {"hvd": lambda: hvd.allreduce(empty, name="scale.round", op=hvd.Sum),
                   "mpi": lambda: COMM.Allreduce(word, word_out, MPI.BAND)}
        rounds = common.interleaved(methods, args.repeats, args.budget, warmup=3)
        results["round_by"][way] = side_by_side(rounds)
        common.say(f"  round {way}: hvdlite {results['round_by'][way]['hvd_s'] * 1e3:.3f} ms, MPI_Allreduce of a "
                   f"word {results['round_by'][way]['mpi_s'] * 1e3:.3f} ms")
        hvd.shutdown()
    results["round"] = results["round_by"][default_round_way(COMM.Get_size())]
    if COMM.Get_rank() == 0:
        with open(args.job_json, "w") as stream:
            json.dump(results, stream)


# ---------------------------------------------------------------------------------------------- the driver
def fit(hosts, values, transform):
    """Least squares values = a + b * transform(h); returns (a, b, R^2)."""
    import numpy as np
    x = np.array([transform(h) for h in hosts], dtype=float)
    y = np.array(values, dtype=float)
    b, a = np.polyfit(x, y, 1)
    residual = y - (a + b * x)
    total = ((y - y.mean()) ** 2).sum()
    return float(a), float(b), float(1 - (residual ** 2).sum() / total) if total else 1.0


def summarise(records):
    rows = []
    for record in records:
        job = record["job"]
        rows.append({"hosts": record["hosts"], "round_ms": job["round"]["hvd_s"] * 1e3,
                     "round_mpi_ms": job["round"]["mpi_s"] * 1e3,
                     **{f"round_{way}_ms": job["round_by"][way]["hvd_s"] * 1e3 for way in ROUND_WAYS},
                     **{f"round_{way}_over_mpi": job["round_by"][way]["hvd_over_mpi"] for way in ROUND_WAYS},
                     **{f"{label}_ms": job[label]["hvd_s"] * 1e3 for label in SIZES},
                     **{f"{label}_mpi_ms": job[label]["mpi_s"] * 1e3 for label in SIZES},
                     **{f"{label}_over_mpi": job[label]["hvd_over_mpi"] for label in SIZES},
                     "init_to_first_s": job["init_to_first_s"], "launch_to_first_s": job["launch_to_first_s"],
                     "mpi_startup_s": job["mpi_startup_s"],
                     "startup_over_mpi": job["init_to_first_s"] / job["mpi_startup_s"],
                     "rss_mib": job["rss_kib_median"] / 1024, "rss_max_mib": job["rss_kib_max"] / 1024,
                     "added_mib": job["added_kib_median"] / 1024})
    return rows


def table(rows):
    from common import format_table
    header = ["hosts", "round ms", "MPI word ms", "round/MPI", "ring/MPI", "doubling/MPI",
              *[column for label in SIZES for column in (f"{label} ms", "vs MPI")], "init->1st s", "MPI's s", "vs MPI",
              "launch->1st s",
              "RSS MiB", "hvdlite adds MiB"]
    return format_table(header, [[r["hosts"], f"{r['round_ms']:.3f}", f"{r['round_mpi_ms']:.3f}",
                                  f"{r['round_ms'] / r['round_mpi_ms']:.1f}", f"{r['round_ring_over_mpi']:.1f}",
                                  f"{r['round_doubling_over_mpi']:.1f}",
                                  *[cell for label in SIZES
                                    for cell in (f"{r[f'{label}_ms']:.3f}", f"{r[f'{label}_over_mpi']:.2f}")],
                                  f"{r['init_to_first_s']:.2f}", f"{r['mpi_startup_s']:.3f}",
                                  f"{r['startup_over_mpi']:.0f}", f"{r['launch_to_first_s']:.1f}",
                                  f"{r['rss_mib']:.0f}", f"{r['added_mib']:.1f}"]
                                 for r in rows])


def targets(rows):
    """(what, measured, passed) for each target this benchmark checks."""
    import math
    checks = []
    for label in SIZES:
        worst = max(r[f"{label}_over_mpi"] for r in rows)
        checks.append((f"{label} all-reduce / MPI_Allreduce at every h (at most {TARGET_RATIO})", worst,
                       worst <= TARGET_RATIO))
    if len(rows) >= 3:
        # The absolute time grows with the ranks per core here (each hop waits for a rank to be scheduled), as
        # MPI's own does: what the round adds is its time over MPI's all-reduce of a word (recursive doubling,
        # log2(h) steps) in the same processes, and that ratio must not grow with log2(h).
        _, slope, _ = fit([r["hosts"] for r in rows], [r["round_ms"] / r["round_mpi_ms"] for r in rows], math.log2)
        checks.append(("round / MPI_Allreduce of a word: slope against log2(h) (at most 0)", slope, slope <= 0))
    # Against MPI's all-reduce of a word (recursive doubling: log2(h) steps), timed in the same processes, the
    # machine's oversubscription cancels out: a round that grows no faster than log2(h) keeps this ratio level.
    growth = (rows[-1]["round_ms"] / rows[-1]["round_mpi_ms"]) / (rows[0]["round_ms"] / rows[0]["round_mpi_ms"])
    checks.append((f"round / MPI_Allreduce of a word: at {rows[-1]['hosts']} hosts over at {rows[0]['hosts']} "
                   f"(at most {TARGET_FLAT})", growth, growth <= TARGET_FLAT))
    # Start-up's absolute time grows here with the ranks per core, as every MPI collective's does: against MPI's
    # own start-up collectives in the same processes the oversubscription cancels out, and that ratio must not grow.
    growth = rows[-1]["startup_over_mpi"] / rows[0]["startup_over_mpi"]
    checks.append((f"start-up (init to first all-reduce) / MPI's start-up: at {rows[-1]['hosts']} hosts over at "
                   f"{rows[0]['hosts']} (at most {TARGET_FLAT})", growth, growth <= TARGET_FLAT))
    spread = max(r["rss_mib"] for r in rows) / min(r["rss_mib"] for r in rows)
    checks.append((f"resident memory per rank: largest / smallest over h (at most {TARGET_FLAT})", spread,
                   spread <= TARGET_FLAT))
    return checks


def plot(rows, path):
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import save_figure
    hosts = [r["hosts"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].plot(hosts, [r["round_ms"] for r in rows], marker="o", label="hvdlite round")
    axes[0].plot(hosts, [r["round_mpi_ms"] for r in rows], marker="s", label="MPI_Allreduce, one word")
    for way, style in (("ring", ":"), ("doubling", "-.")):
        axes[0].plot(hosts, [r[f"round_{way}_ms"] for r in rows], linestyle=style, linewidth=1,
                     label=f"round, {way} forced")
    axes[0].set_ylabel("ms")
    axes[0].set_title("negotiation round")
    for label in SIZES:
        axes[1].plot(hosts, [r[f"{label}_over_mpi"] for r in rows], marker="o", label=label)
    axes[1].plot(hosts, [r["round_ms"] / r["round_mpi_ms"] for r in rows], marker="^", linestyle="--",
                 label="round / MPI word")
    axes[1].axhline(TARGET_RATIO, color="red", linestyle=":", linewidth=1, label="target")
    axes[1].axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axes[1].set_title("time / MPI_Allreduce")
    axes[1].set_yscale("log", base=2)
    axes[2].plot(hosts, [r["init_to_first_s"] for r in rows], marker="o", label="init -> first all-reduce, s")
    axes[2].plot(hosts, [r["mpi_startup_s"] for r in rows], marker="v", label="MPI's start-up collectives, s")
    axes[2].plot(hosts, [r["added_mib"] / 10 for r in rows], marker="s", label="hvdlite's memory, 10 MiB")
    axes[2].set_title("start-up and memory per rank")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("hosts (one rank each)")
        ax.legend(fontsize=8)
    save_figure(fig, path)


def main():
    import mpi4py
    mpi4py.rc.initialize = "--job" in sys.argv  # the driver only launches jobs
    import common
    parser = common.hosts_driver_arguments(__doc__, "scale")
    parser.add_argument("--launched-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--hosts", default=",".join(map(str, HOSTS)), help="host counts, one rank each")
    parser.add_argument("--rate-mbit", type=int, default=1000, help="each host link's rate; 0 unshaped")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per timed batch")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()
    if args.job:
        return run_job(args)
    from hvdlite.testing.simulated_hosts import hosts_for_bench
    if args.quick:
        args.repeats, args.budget = 3, 0.1
    counts = [int(h) for h in args.hosts.split(",")]
    records = []
    started = time.time()
    with hosts_for_bench(max(counts), "bench/scale.py", rate_mbit=args.rate_mbit or None) as hosts:
        for count in counts:
            print(f"-- {count} hosts x 1 rank", flush=True)
            program = [sys.executable, os.path.abspath(__file__), "--job", "--repeats", str(args.repeats),
                       "--budget", str(args.budget), "--launched-at", str(time.time())]
            job = common.run_job_on_hosts(hosts, program, count, 1, "blocks", args.network, args.job_timeout,
                                          f"{count} hosts")
            records.append({"hosts": count, "job": job})
    rows = summarise(records)
    print(table(rows))
    payload = {"benchmark": "scale", "rate_mbit": args.rate_mbit, "network": args.network, "rows": rows,
               "records": records, "table": table(rows), "targets": common.targets_record(targets(rows)),
               "machine": common.driver_machine(started)}
    common.write_json(args.json, payload)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
