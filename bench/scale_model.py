"""A model of a data-parallel training step's communication across h hosts, up to 1024, from the step counts of
hvdlite's algorithms and the latency and bandwidth constants measured on this machine (bench/results/).

    python bench/scale_model.py [--json PATH] [--plot PATH]

What it reads, all recorded by the benchmarks beside it (nothing here is typed in by hand but the published
figures it is compared with, each cited):
- multihost.json: the TCP ring across 2 and 4 simulated hosts of one rank, links shaped to 1 Gbit/s, 256 KiB to
  64 MiB: least squares of t = 2(h-1)/h * S / B_eff + 2(h-1) * alpha gives the ring's step latency alpha and the
  rate TCP reaches on a link (B_eff / link rate = eta);
- scale.json: the negotiation round at 2 hosts, whose bits go around the ring both ways (h / 2 hops, each a message
  on the ring's connections: alpha; from 8 hosts they go in ceil(log2(h)) hops at doubling distances), for its
  fixed part; and the 1 MiB all-reduce and the round at 2 to 32 hosts,
  which the model is checked against (within 15%, or said where not);
- allreduce.json: the all-reduce among the ranks of one host at its largest size (bus bandwidth through host
  memory), the hierarchical all-reduce's steps within a host.

The model of one step: the gradients (G bytes of float32) are fused into ceil(G / F) batches of at most the fusion
threshold F (64 MiB, the default); each batch is negotiated in one round and all-reduced hierarchically: within
each host of r ranks (a reduce-scatter and an all-gather through host memory, 2 (r-1)/r * S / B_local), and across
the h hosts over the ring of TCP connections (2 (h-1) steps; every host's link carries 2 (h-1)/h * S). The same
step is also priced with what logarithmic all-reduces across hosts (recursive halving and doubling) would cost,
the change that would lift the first limit. Scaling efficiency = compute / (compute + what communication leaves exposed):
the batches before the last overlap the backward pass (two thirds of the step's compute), the last never does.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

RESULTS = os.path.join(HERE, "results")
FUSION_BYTES = 64 << 20
HOSTS = [2 ** k for k in range(1, 11)]
ROUND_DOUBLING_MIN_HOSTS = 8  # HVDLITE_ROUND_DOUBLING_MIN_HOSTS's default: the round's hops from there are log2(h)
LINKS_GBIT = (25, 100, 400)
RANKS_PER_HOST = (1, 8)
CHECK_TOLERANCE = 0.15
BACKWARD_SHARE = 2 / 3  # of a step's compute: where all but the last batch's communication can hide

# Gradient sizes (float32): ResNet-50 has 25.6 million parameters (He et al., arXiv:1512.03385, table 1: 3.8
# GFLOPs, 25.6M for the 50-layer net as torchvision counts it), BERT-large 340 million (Devlin et al.,
# arXiv:1810.04805, section 3).
MODELS = {"ResNet-50": 25.6e6 * 4, "BERT-large": 340e6 * 4}

# Published figures the model is compared with.
HOROVOD = {
    # Horovod's benchmarks (docs/benchmarks.rst of horovod/horovod, and its README): ResNet-101 on servers of 4
    # Pascal GPUs linked by 25 Gbit/s RoCE; 90% scaling efficiency on 128 servers (512 GPUs), as on 32 (128 GPUs);
    # tf_cnn_benchmarks at batch 64 per GPU made 1656.82 images/s on 16 GPUs. Sergeev and Del Balso,
    # arXiv:1802.05799, report 88% for ResNet-101 and Inception V3 on 128 GPUs of the same kind.
    "source": "horovod/horovod docs/benchmarks.rst and README; Sergeev & Del Balso, arXiv:1802.05799",
    "parameters": 44.5e6,        # ResNet-101 (He et al., arXiv:1512.03385)
    "batch": 64, "images_per_s_16_gpus": 1656.82, "link_gbit": 25, "ranks_per_host": 4,
    "efficiency": {32: 0.90, 128: 0.90}, "paper_efficiency_128_gpus": 0.88,
}
NCCL = {
    # NVIDIA/nccl issue 1368: all_reduce_perf on 5 servers of 8 H100 with 4 x 400 Gbit/s RoCE each, NCCL 2.20: ring
    # bus bandwidth 190 GB/s at large sizes (tree 150 GB/s). NVIDIA/nccl issue 457 (a maintainer): on a ring each
    # rank sends and receives 2 (N-1)/N * S; issue 1712 (a maintainer): the ring's latency grows linearly with the
    # number of ranks, the tree's does not.
    "source": "github.com/NVIDIA/nccl issues 1368, 457, 1712",
    "hosts": 5, "nics_per_host": 4, "link_gbit": 400, "ring_busbw_GBps": 190.0, "tree_busbw_GBps": 150.0,
}


def load(name):
    with open(os.path.join(RESULTS, f"{name}.json")) as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------------ constants
def fit_ring(multihost):
    """(alpha in s, eta): the ring's step latency and the share of a shaped link's rate that TCP reaches."""
    rows = [r for r in multihost["rows"] if r["rate_mbit"] == 1000 and r["layout"] in ("2x1", "4x1")
            and r["bytes"] >= 256 << 10]
    hosts = np.array([int(r["layout"].split("x")[0]) for r in rows], float)
    size = np.array([r["bytes"] for r in rows], float)
    # Relative least squares: every size weighs the same, not only the 64 MiB rows.
    times = np.array([r["ring_s"] for r in rows])
    columns = np.stack([2 * (hosts - 1) / hosts * size, 2 * (hosts - 1)], axis=1) / times[:, None]
    (inverse_rate, alpha), *_ = np.linalg.lstsq(columns, np.ones_like(times), rcond=None)
    rate = 1000e6 / 8
    return float(alpha), float(1 / inverse_rate / rate)


def fit_round(scale, alpha):
    """(c, hop) in s: the round across hosts is c + round_hops(h) hops over the core's connections. A hop is one small
    message on the connections whose step latency alpha the ring's fit measured, so hop = alpha; c is what the round
    at 2 hosts (one hop) took beyond it: the round within each host and its bookkeeping. The round's own growth
    measured here is not used: with h ranks on 2 cores, each hop waits for a descheduled rank to get a core."""
    two = next(r for r in scale["rows"] if r["hosts"] == 2)
    return max(two["round_ms"] / 1e3 - alpha, 0.0), alpha


def local_rate(allreduce):
    """Bytes/s of the all-reduce among the ranks of one host, at its largest size (bus bandwidth)."""
    row = max(allreduce["rows"], key=lambda r: r["bytes"])
    return row["methods"]["auto"]["busbw_GBps"] * 1e9


# ---------------------------------------------------------------------------------------------------- model
def ring_time(size, hosts, rate, alpha):
    """The ring across hosts: 2 (h-1) steps, each host's link carrying 2 (h-1)/h of the batch."""
    return 2 * (hosts - 1) / hosts * size / rate + 2 * (hosts - 1) * alpha


def doubling_time(size, hosts, rate, alpha):
    """Recursive halving and doubling (Rabenseifner): the same bytes, 2 log2(h) steps."""
    return 2 * (hosts - 1) / hosts * size / rate + 2 * math.log2(hosts) * alpha


def round_hops(hosts):
    """Hops of the round across hosts: both ways around the ring (h/2), or dissemination at doubling distances."""
    return math.ceil(math.log2(hosts)) if hosts >= ROUND_DOUBLING_MIN_HOSTS else hosts / 2


def step(constants, gradient_bytes, hosts, ranks_per_host, link_gbit, logarithmic=False):
    """A step's communication, by part (seconds), and the last batch's all-reduce (never overlapped)."""
    rate = link_gbit * 1e9 / 8 * constants["eta"]
    batches = [FUSION_BYTES] * int(gradient_bytes // FUSION_BYTES)
    if gradient_bytes % FUSION_BYTES:
        batches.append(gradient_bytes % FUSION_BYTES)
    alpha, hop = constants["alpha_s"], constants["round_hop_s"]
    across = doubling_time if logarithmic else ring_time
    bandwidth = sum(2 * (hosts - 1) / hosts * b / rate for b in batches)
    latency = sum(across(b, hosts, rate, alpha) for b in batches) - bandwidth
    local = sum(2 * (ranks_per_host - 1) / ranks_per_host * b / constants["local_Bps"] for b in batches)
    hops = round_hops(hosts)
    rounds = len(batches) * (constants["round_fixed_s"] + hops * hop)
    last = (across(batches[-1], hosts, rate, alpha) + 2 * (ranks_per_host - 1) / ranks_per_host * batches[-1]
            / constants["local_Bps"] + constants["round_fixed_s"] + hops * hop)
    return {"bandwidth": bandwidth, "ring_latency": latency, "within_hosts": local, "rounds": rounds,
            "total": bandwidth + latency + local + rounds, "last_batch": last, "batches": len(batches)}


def efficiency(compute_s, parts):
    exposed = max(parts["last_batch"], parts["total"] - BACKWARD_SHARE * compute_s)
    return compute_s / (compute_s + exposed)


def first_limit(constants, gradient_bytes, ranks_per_host, link_gbit):
    """The smallest h at which a part that grows with h (the rounds, the ring's latency) reaches a tenth of the
    bandwidth term, and which part it is; None when none does up to 1024 hosts."""
    for hosts in HOSTS:
        parts = step(constants, gradient_bytes, hosts, ranks_per_host, link_gbit)
        growing = {"rounds": parts["rounds"] - parts["batches"] * constants["round_fixed_s"],  # the hops only
                   "ring_latency": parts["ring_latency"]}
        for part, seconds in growing.items():
            if seconds >= 0.1 * parts["bandwidth"]:
                return hosts, part
    return None


# --------------------------------------------------------------------------------------------------- checks
def check_against_measurement(constants, scale):
    """The model's 1 MiB all-reduce and round against scale.json at each h (1 rank a host, its link rate)."""
    rate = scale.get("rate_mbit", 1000) * 1e6 / 8 * constants["eta"]
    rows = []
    for r in scale["rows"]:
        h = r["hosts"]
        predicted = ring_time(1 << 20, h, rate, constants["alpha_s"]) * 1e3
        round_predicted = (constants["round_fixed_s"] + round_hops(h) * constants["round_hop_s"]) * 1e3
        rows.append({"hosts": h, "allreduce_1MiB_ms": r["1 MiB_ms"], "model_ms": predicted,
                     "error": predicted / r["1 MiB_ms"] - 1, "round_ms": r["round_ms"],
                     "round_model_ms": round_predicted,
                     "round_error": round_predicted / r["round_ms"] - 1})
    return rows


def compare_with_horovod(constants):
    """The model's scaling efficiency for Horovod's published setting (ResNet-101, 4 GPUs a server, 25 Gbit/s),
    with the compute time of a step taken from Horovod's own throughput figure."""
    h = HOROVOD
    compute = h["batch"] / (h["images_per_s_16_gpus"] / 16)
    rows = []
    for servers, published in h["efficiency"].items():
        parts = step(constants, h["parameters"] * 4, servers, h["ranks_per_host"], h["link_gbit"])
        rows.append({"servers": servers, "gpus": servers * h["ranks_per_host"], "compute_s": compute,
                     "communication_s": parts["total"], "model_efficiency": efficiency(compute, parts),
                     "no_overlap_efficiency": compute / (compute + parts["total"]), "published": published})
    return rows


def compare_with_nccl(constants):
    """The ring's bus bandwidth the model gives a host of NCCL's published setting, against NCCL's figure."""
    n = NCCL
    model = n["nics_per_host"] * n["link_gbit"] * 1e9 / 8 * constants["eta"] / 1e9
    return {"model_ring_busbw_GBps": model, "published_ring_busbw_GBps": n["ring_busbw_GBps"],
            "published_tree_busbw_GBps": n["tree_busbw_GBps"], "ratio": model / n["ring_busbw_GBps"]}


# ---------------------------------------------------------------------------------------------------- report
def predictions(constants):
    rows = []
    for model, gradient in MODELS.items():
        for r in RANKS_PER_HOST:
            for link in LINKS_GBIT:
                for hosts in HOSTS:
                    parts = step(constants, gradient, hosts, r, link)
                    logarithmic = step(constants, gradient, hosts, r, link, logarithmic=True)
                    rows.append({"model": model, "ranks_per_host": r, "link_gbit": link, "hosts": hosts,
                                 **{f"{k}_ms": v * 1e3 for k, v in parts.items() if k not in ("batches",)},
                                 "batches": parts["batches"], "logarithmic_total_ms": logarithmic["total"] * 1e3})
    return rows


def tables(constants, checks, horovod, nccl, rows, limits):
    out = [f"constants measured here: ring step latency {constants['alpha_s'] * 1e6:.1f} us, TCP at "
           f"{constants['eta']:.3f} of a link's rate, round {constants['round_fixed_s'] * 1e6:.0f} us + "
           f"{constants['round_hop_s'] * 1e6:.1f} us a hop, within a host {constants['local_Bps'] / 1e9:.2f} GB/s",
           "", "model against measurement (bench/results/scale.json, 1 Gbit/s links, one rank a host):", ""]
    out.append(common.format_table(
        ["hosts", "1 MiB all-reduce, ms", "model, ms", "error", "round, ms", "model, ms", "error"],
        [[c["hosts"], f"{c['allreduce_1MiB_ms']:.2f}", f"{c['model_ms']:.2f}", f"{c['error']:+.0%}",
          f"{c['round_ms']:.3f}", f"{c['round_model_ms']:.3f}", f"{c['round_error']:+.0%}"] for c in checks]))
    out += ["", "a step's communication (ms): hosts 64 / 256 / 1024, as built (the ring across hosts; rounds in "
            "log2(h) hops from 8 hosts), and in brackets with all-reduces across hosts in 2 log2(h) steps", ""]
    table = []
    for model in MODELS:
        for r in RANKS_PER_HOST:
            for link in LINKS_GBIT:
                picked = {row["hosts"]: row for row in rows if (row["model"], row["ranks_per_host"],
                                                                 row["link_gbit"]) == (model, r, link)}
                cells = [f"{picked[h]['total_ms']:.0f} ({picked[h]['logarithmic_total_ms']:.0f})"
                         for h in (64, 256, 1024)]
                limit = limits[(model, r, link)]
                table.append([model, r, link, *cells,
                              f"{limit[1].replace('_', ' ')} from {limit[0]} hosts" if limit else "none to 1024"])
    out.append(common.format_table(["gradients", "ranks a host", "Gbit/s", "64 hosts", "256 hosts", "1024 hosts",
                                     "first to reach 10% of the bandwidth term"], table))
    out += ["", f"against Horovod's published scaling ({HOROVOD['source']}):", ""]
    out.append(common.format_table(
        ["servers x GPUs", "compute, s", "communication, s", "model (overlapped)", "model (no overlap)", "published"],
        [[f"{h['servers']} x 4", f"{h['compute_s']:.3f}", f"{h['communication_s']:.3f}",
          f"{h['model_efficiency']:.0%}", f"{h['no_overlap_efficiency']:.0%}", f"{h['published']:.0%}"]
         for h in horovod]))
    out += ["", f"against NCCL's published ring ({NCCL['source']}): {NCCL['hosts']} hosts of "
            f"{NCCL['nics_per_host']} x {NCCL['link_gbit']} Gbit/s, model {nccl['model_ring_busbw_GBps']:.0f} GB/s "
            f"bus bandwidth, published {nccl['published_ring_busbw_GBps']:.0f} GB/s (x{nccl['ratio']:.2f})"]
    return "\n".join(out)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=False)
    for ax, model in zip(axes, MODELS):
        for link, color in zip(LINKS_GBIT, ("#d62728", "#1f77b4", "#2ca02c")):
            picked = [r for r in rows if (r["model"], r["ranks_per_host"], r["link_gbit"]) == (model, 8, link)]
            ax.plot([r["hosts"] for r in picked], [r["total_ms"] for r in picked], "o-", color=color,
                    label=f"{link} Gbit/s, as built")
            ax.plot([r["hosts"] for r in picked], [r["logarithmic_total_ms"] for r in picked], "--", color=color,
                    label=f"{link} Gbit/s, all-reduces in log2(h) steps")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("hosts (8 ranks each)")
        ax.set_ylabel("communication per step, ms")
        ax.set_title(f"{model} gradients ({MODELS[model] / 1e6:.0f} MB)")
        ax.legend(fontsize=7)
    common.save_figure(fig, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=os.path.join(RESULTS, "scale_model.json"))
    parser.add_argument("--plot", nargs="?", const=os.path.join(os.path.dirname(HERE), "docs", "benchmarks",
                                                                 "scale_model.png"))
    args = parser.parse_args()
    multihost, scale, allreduce = load("multihost"), load("scale"), load("allreduce")
    alpha, eta = fit_ring(multihost)
    fixed, hop = fit_round(scale, alpha)
    constants = {"alpha_s": alpha, "eta": eta, "round_fixed_s": fixed, "round_hop_s": hop,
                 "local_Bps": local_rate(allreduce)}
    checks = check_against_measurement(constants, scale)
    rows = predictions(constants)
    limits = {(m, r, link): first_limit(constants, g, r, link) for m, g in MODELS.items()
              for r in RANKS_PER_HOST for link in LINKS_GBIT}
    horovod, nccl = compare_with_horovod(constants), compare_with_nccl(constants)
    text = tables(constants, checks, horovod, nccl, rows, limits)
    print(text)
    within = [c["hosts"] for c in checks if abs(c["error"]) <= CHECK_TOLERANCE]
    result = {"benchmark": "scale_model", "constants": constants, "checks": checks,
              "hosts_within_tolerance": within, "tolerance": CHECK_TOLERANCE, "predictions": rows,
              "first_limits": [{"model": m, "ranks_per_host": r, "link_gbit": link,
                                "hosts": v[0] if v else None, "part": v[1] if v else None}
                               for (m, r, link), v in limits.items()],
              "horovod": horovod, "nccl": nccl, "table": text, "command": common.this_command()}
    common.write_json(args.json, result)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
