"""float32 all-reduce across simulated hosts, 4 KiB to 64 MiB: hvdlite (auto, ring, hierarchical) against mpi4py's
`Allreduce`, on 2 x 1, 4 x 1, 2 x 2 ranks in blocks and 2 x 2 round-robin, over unshaped links and links shaped to
1 Gbit/s.

    sudo python bench/multihost.py [--quick] [--rates 0,1000] [--layouts 2x1,4x1,2x2,2x2rr] [--plot]

The hosts are network namespaces on this machine (hvdlite/testing/simulated_hosts.py: TCP through a bridge, each
host link shaped with tc tbf in both directions), so it needs root. Each layout is one job per rate; each
hvdlite algorithm needs its own init, so the job has one phase per algorithm, and MPI_Allreduce is timed again,
interleaved, in each phase; ratios pair rounds of one phase (bench/common.py).

Figures: algorithm bandwidth (bytes / time); host bus bandwidth, what each host's link carries in each direction
at the least an all-reduce needs, 2 (h - 1) / h x bytes / time for h hosts; and its ratio to the link: the
shaped rate, the physical limit, and what TCP itself gets through that link (measured here, one stream each way
at once).
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# Phases: (HVDLITE_ALLREDUCE_ALGORITHM, HVDLITE_CROSS_HOST_TRANSPORT). The ring is the flat ring over MPI; the
# hierarchical one crosses hosts over hvdlite's own TCP ring, and once more over MPI's point-to-point.
PHASES = {"auto": ("auto", "tcp"), "ring": ("ring", "tcp"), "hierarchical": ("hierarchical", "tcp"),
          "hierarchical_mpi": ("hierarchical", "mpi")}
ALGORITHMS = tuple(PHASES)
SIZES = [4096 * 4 ** k for k in range(8)]  # 4 KiB .. 64 MiB
QUICK_SIZES = [4096, 262144, 1 << 20, 16 << 20, 64 << 20]
LAYOUTS = {"2x1": (2, 1, "blocks"), "4x1": (4, 1, "blocks"), "2x2": (2, 2, "blocks"), "2x2rr": (2, 2, "round-robin")}
RATES_MBIT = (0, 1000)  # 0: unshaped
NOISE = 0.05  # ratios within this of 1 count as level (rounds of one run on a shared machine differ this much)
TARGET_BUS_ONE_PER_HOST = 0.93   # >= 16 MiB, 1 rank per host: host bus bandwidth / link rate (0.97 of TCP's)
TARGET_SPEEDUP_2X2 = 1.3         # 64 MiB, 2 x 2: MPI time / hvdlite time
TARGET_BUS_2X2 = 0.93
TARGET_MEDIUM_4X1 = 1.0          # 4 KiB, 256 KiB and 1 MiB on 4 x 1: hvdlite time / MPI time at most
TARGET_SMALL_2_HOSTS = 2.0       # 4 KiB on 2 hosts: hvdlite time / MPI time at most


# ---------------------------------------------------------------------------------------------- inside the job
def run_job(args):
    import numpy as np

    import common
    from common import COMM, MPI, median, median_ratio

    import hvdlite as hvd
    from hvdlite.requests import Collective, Request, submit

    sizes = [int(s) for s in args.sizes.split(",")]
    results = {"ranks": COMM.Get_size(), "sizes": sizes, "phases": {}}
    for algorithm, (choice, transport) in PHASES.items():
        os.environ["HVDLITE_ALLREDUCE_ALGORITHM"] = choice
        os.environ["HVDLITE_CROSS_HOST_TRANSPORT"] = transport
        hvd.init()
        phase = results["phases"][algorithm] = {}
        for nbytes in sizes:
            x = np.full(nbytes // 4, hvd.rank() + 1, dtype=np.float32)
            expected = np.float32(hvd.size() * (hvd.size() + 1) / 2)
            out_hvd, out_mpi = np.empty_like(x), np.empty_like(x)
            request = Request(Collective.ALLREDUCE, f"bench.{nbytes}", "float32", x.shape, x.ctypes.data,
                              out_hvd.ctypes.data, op=hvd.Sum, keepalive=(x, out_hvd))

            def hvd_call():
                handle = submit(request)
                handle.wait()
                handle.release()
            cpu = {"hvd": [0.0, 0.0], "mpi": [0.0, 0.0]}  # process CPU seconds, wall seconds

            def timed_cpu(name, call):
                def run():
                    cpu_start, wall_start = time.process_time(), time.perf_counter()
                    call()
                    cpu[name][0] += time.process_time() - cpu_start
                    cpu[name][1] += time.perf_counter() - wall_start
                return run
            methods = {"hvd": timed_cpu("hvd", hvd_call),
                       "mpi": timed_cpu("mpi", lambda: COMM.Allreduce(x, out_mpi, MPI.SUM))}
            for name, output in (("hvd", out_hvd), ("mpi", out_mpi)):  # correctness first, then the timed rounds
                methods[name]()
                if not np.all(output == expected):
                    raise SystemExit(f"{name} ({algorithm} phase) {nbytes} B: wrong all-reduce result")
            rounds = common.interleaved(methods, args.repeats, args.budget, warmup=2)
            figures = phase[str(nbytes)] = {"hvd_s": median(rounds["hvd"]), "mpi_s": median(rounds["mpi"]),
                                            "hvd_over_mpi": median_ratio(rounds["hvd"], rounds["mpi"]),
                                            # cores the rank kept busy while it waited (its CPU time / wall time)
                                            "hvd_cpu": cpu["hvd"][0] / max(cpu["hvd"][1], 1e-9),
                                            "mpi_cpu": cpu["mpi"][0] / max(cpu["mpi"][1], 1e-9)}
            common.say(f"  {algorithm:>12} {common.human_bytes(nbytes):>8}: hvdlite {figures['hvd_s'] * 1e3:8.3f} ms"
                       f"  MPI {figures['mpi_s'] * 1e3:8.3f} ms  ratio {figures['hvd_over_mpi']:.2f}"
                       f"  cores busy {figures['hvd_cpu']:.2f} / MPI {figures['mpi_cpu']:.2f}")
        hvd.shutdown()
    if COMM.Get_rank() == 0:
        with open(args.job_json, "w") as stream:
            json.dump(results, stream)


# ---------------------------------------------------------------------------------------------- the driver
TCP_RECEIVER = """
import socket, sys, time
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", int(sys.argv[1]))); server.listen(1)
print("ready", flush=True)
connection, _ = server.accept()
total, buffer = 0, bytearray(1 << 20)
start = None
while True:
    n = connection.recv_into(buffer)
    if not n:
        break
    if start is None:
        start = time.perf_counter()
    total += n
print(total * 8 / (time.perf_counter() - start) / 1e6, flush=True)
"""
TCP_SENDER = """
import socket, sys, time
connection = socket.create_connection((sys.argv[1], int(sys.argv[2])))
chunk = bytes(1 << 20)
end = time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end:
    connection.sendall(chunk)
connection.close()
"""


def tcp_rate_mbit(hosts, tries=3):
    """What TCP gets through h1 <-> h2's links: the best of a few tries (a busy moment reads low) of one stream each
    way at once (a ring sends and receives at once), each try's slower direction."""
    return max(tcp_try_mbit(hosts) for _ in range(tries))


def tcp_try_mbit(hosts, seconds=3.0):
    receivers = []
    for index, (sender, receiver) in enumerate((("h1", "h2"), ("h2", "h1"))):
        port = str(5201 + index)
        process = hosts.popen(receiver, [sys.executable, "-c", TCP_RECEIVER, port], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "ready"
        receivers.append((process, sender, hosts.address(receiver), port))
    senders = [hosts.popen(sender, [sys.executable, "-c", TCP_SENDER, address, port, str(seconds)])
               for _, sender, address, port in receivers]
    for process in senders:
        process.wait(timeout=seconds + 30)
    rates = [float(process.communicate(timeout=30)[0].split()[-1]) for process, *_ in receivers]
    return min(rates)


def run_layout(hosts, layout, sizes, args):
    import common
    count, per_host, placement = LAYOUTS[layout]
    program = [sys.executable, os.path.abspath(__file__), "--job", "--sizes", ",".join(map(str, sizes)),
               "--repeats", str(args.repeats), "--budget", str(args.budget)]
    return common.run_job_on_hosts(hosts, program, count, per_host, placement, args.network, args.job_timeout, layout)


def summarise(records):
    """Rows for the table, one per (rate, layout, size)."""
    rows = []
    for record in records:
        count = LAYOUTS[record["layout"]][0]
        link = record["link_mbit"]
        for nbytes in record["job"]["sizes"]:
            phases = {a: record["job"]["phases"][a][str(nbytes)] for a in ALGORITHMS}
            mpi_s = min(p["mpi_s"] for p in phases.values())  # MPI timed in every phase: its best
            row = {"rate_mbit": record["rate_mbit"], "layout": record["layout"], "bytes": nbytes,
                   "tcp_mbit": record["tcp_mbit"], "mpi_s": mpi_s}
            for algorithm, p in phases.items():
                row[f"{algorithm}_s"] = p["hvd_s"]
                row[f"{algorithm}_over_mpi"] = p["hvd_over_mpi"]
                row[f"{algorithm}_cpu"] = p.get("hvd_cpu")
            row["mpi_cpu"] = phases["auto"].get("mpi_cpu")
            bus_factor = 2 * (count - 1) / count
            row["auto_bus_mbit"] = bus_factor * nbytes * 8 / row["auto_s"] / 1e6
            row["mpi_bus_mbit"] = bus_factor * nbytes * 8 / mpi_s / 1e6
            row["auto_bus_of_link"] = row["auto_bus_mbit"] / link if link else None
            row["auto_bus_of_tcp"] = row["auto_bus_mbit"] / record["tcp_mbit"]
            rows.append(row)
    return rows


def targets(rows):
    checks = []
    shaped = [r for r in rows if r["rate_mbit"]]
    for r in shaped:
        name, size = r["layout"], r["bytes"]
        if name in ("2x1", "4x1") and size >= 16 << 20:
            checks.append((f"{name} {size >> 20} MiB: host bus bandwidth / link >= {TARGET_BUS_ONE_PER_HOST}",
                           r["auto_bus_of_link"], r["auto_bus_of_link"] >= TARGET_BUS_ONE_PER_HOST))
        if name in ("2x2", "2x2rr") and size == 64 << 20:
            checks.append((f"{name} 64 MiB: MPI / hvdlite >= {TARGET_SPEEDUP_2X2}", 1 / r["auto_over_mpi"],
                           1 / r["auto_over_mpi"] >= TARGET_SPEEDUP_2X2))
            checks.append((f"{name} 64 MiB: host bus bandwidth / link >= {TARGET_BUS_2X2}", r["auto_bus_of_link"],
                           r["auto_bus_of_link"] >= TARGET_BUS_2X2))
        if name == "4x1" and size in (4 << 10, 256 << 10, 1 << 20):
            checks.append((f"4x1 {size >> 10} KiB: hvdlite / MPI <= {TARGET_MEDIUM_4X1}", r["auto_over_mpi"],
                           r["auto_over_mpi"] <= TARGET_MEDIUM_4X1))
        if name == "2x1" and size == 4096:
            checks.append((f"2x1 4 KiB: hvdlite / MPI <= {TARGET_SMALL_2_HOSTS}", r["auto_over_mpi"],
                           r["auto_over_mpi"] <= TARGET_SMALL_2_HOSTS))
    return checks


def crossovers(rows):
    """{(rate, layout): the smallest size from which hvdlite's own algorithm (the better of ring and hierarchical)
    is no slower than MPI_Allreduce (within NOISE) at every larger size}: where auto should switch on this
    network."""
    found = {}
    for key in dict.fromkeys((r["rate_mbit"], r["layout"]) for r in rows):
        mine = sorted((r for r in rows if (r["rate_mbit"], r["layout"]) == key), key=lambda r: r["bytes"])
        switch = None
        for r in reversed(mine):
            if min(r["ring_over_mpi"], r["hierarchical_over_mpi"]) > 1.0 + NOISE:
                break
            switch = r["bytes"]
        found[key] = switch
    return found


def table(rows):
    from common import format_table, human_bytes
    header = ["link", "layout", "size", "MPI ms", "auto ms", "ring ms", "hier ms", "hier/MPI ms", "MPI/auto",
              "bus Mbit/s", "bus/link", "bus/TCP", "cores auto", "cores MPI"]
    body = []
    for r in rows:
        body.append([f"{r['rate_mbit']} Mbit/s" if r["rate_mbit"] else "unshaped", r["layout"], human_bytes(r["bytes"]),
                     f"{r['mpi_s'] * 1e3:.3f}", f"{r['auto_s'] * 1e3:.3f}", f"{r['ring_s'] * 1e3:.3f}",
                     f"{r['hierarchical_s'] * 1e3:.3f}", f"{r['hierarchical_mpi_s'] * 1e3:.3f}",
                     f"{1 / r['auto_over_mpi']:.2f}", f"{r['auto_bus_mbit']:.0f}",
                     f"{r['auto_bus_of_link']:.2f}" if r["auto_bus_of_link"] is not None else "-",
                     f"{r['auto_bus_of_tcp']:.2f}", f"{r['auto_cpu']:.2f}", f"{r['mpi_cpu']:.2f}"])
    return format_table(header, body)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from common import save_figure
    shaped = [r for r in rows if r["rate_mbit"]] or rows
    fig, axes = plt.subplots(1, len(LAYOUTS), figsize=(4 * len(LAYOUTS), 3.6), sharey=True)
    for ax, layout in zip(axes, LAYOUTS):
        mine = [r for r in shaped if r["layout"] == layout]
        if not mine:
            continue
        sizes = [r["bytes"] for r in mine]
        for algorithm in ALGORITHMS:
            ax.plot(sizes, [1 / r[f"{algorithm}_over_mpi"] for r in mine], marker="o", label=algorithm)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{layout}, {mine[0]['rate_mbit'] or 'unshaped'} Mbit/s")
        ax.set_xlabel("bytes")
    axes[0].set_ylabel("speed-up over MPI_Allreduce")
    axes[0].legend()
    save_figure(fig, path)


def main():
    import mpi4py
    mpi4py.rc.initialize = "--job" in sys.argv  # the driver only launches jobs
    import common
    parser = common.hosts_driver_arguments(__doc__, "multihost")
    parser.add_argument("--sizes", help="comma-separated sizes in bytes (default: 4 KiB to 64 MiB by 4x)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per timed batch")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    parser.add_argument("--rates", default=",".join(map(str, RATES_MBIT)), help="link rates in Mbit/s; 0 unshaped")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args()
    if args.job:
        return run_job(args)
    from hvdlite.testing.simulated_hosts import hosts_for_bench
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else QUICK_SIZES if args.quick else SIZES
    if args.quick:
        args.repeats = min(args.repeats, 3)
    records = []
    started = time.time()
    for rate in [int(r) for r in args.rates.split(",")]:
        with hosts_for_bench(4, "bench/multihost.py", rate_mbit=rate or None) as hosts:
            tcp = tcp_rate_mbit(hosts)
            print(f"== links {rate or 'unshaped'} Mbit/s: TCP gets {tcp:.0f} Mbit/s each way", flush=True)
            for layout in args.layouts.split(","):
                print(f"-- {layout}", flush=True)
                job = run_layout(hosts, layout, sizes, args)
                records.append({"rate_mbit": rate, "link_mbit": rate, "tcp_mbit": tcp, "layout": layout, "job": job})
    rows = summarise(records)
    print(table(rows))
    switches = crossovers(rows)
    for (rate, layout), switch in switches.items():
        print(f"{rate or 'unshaped'} Mbit/s {layout}: ring/hierarchical no slower than MPI from "
              f"{switch if switch is not None else 'no size measured'} bytes")
    measured = [switch for switch in switches.values() if switch is not None]
    if measured:
        print(f"HVDLITE_AUTO_CROSS_HOST_RING_MIN_BYTES for these links: {max(measured)} (the largest crossover)")
    payload = {"benchmark": "multihost", "network": args.network, "rows": rows, "records": records,
               "table": table(rows),
               "crossovers": [{"rate_mbit": rate, "layout": layout, "bytes": switch}
                              for (rate, layout), switch in switches.items()],
               "targets": common.targets_record(targets(rows)), "machine": common.driver_machine(started)}
    common.write_json(args.json, payload)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
