"""Refreshes the generated parts of docs/benchmarks.md (tables, targets, machine, commands) and the plots in
docs/benchmarks/ from the JSON results under bench/results/ (what `make bench` writes).

    python bench/report.py

Each generated block sits between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in docs/benchmarks.md; the
text around them is written by hand and kept.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
PLOTS = os.path.join(ROOT, "docs", "benchmarks")
TRAINING_TARGET = 1.0


def load(name):
    path = os.path.join(RESULTS, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def verdict(ok):
    return "PASS" if ok else "FAIL"


def machine_block(result):
    m = result.get("machine", {})
    lines = [f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('platform', '')}",
             f"- {m.get('mpi', '')}; mpi4py {m.get('mpi4py', '')}, numpy {m.get('numpy', '')}, "
             f"torch {m.get('torch', '')}, Python {m.get('python', '')}",
             f"- load average at the start: {', '.join(f'{x:.1f}' for x in m.get('load_average', []))} "
             f"(a shared machine: every figure is a ratio of interleaved rounds)",
             f"- revision {m.get('git', '')}, {m.get('date', '')}; {result.get('repeats', '?')} rounds per figure",
             f"- command: `{m.get('command', '')}`"]
    if result.get("cache_capacity"):
        lines[-2] += f"; response cache {result['cache_capacity']} entries (HVDLITE_CACHE_CAPACITY)"
    if result.get("launches", 1) > 1:
        lines[-2] += f", median of {result['launches']} separate launches"
        lines.append(f"- each launch: `{m.get('launch_command', '')}`")
    return "\n".join(lines)


def allreduce_block(result):
    return (machine_block(result) + "\n\n![all-reduce latency and bus bandwidth](benchmarks/allreduce.png)\n\n"
            + result["table"])


def fusion_block(result):
    return machine_block(result) + "\n\n![fusion](benchmarks/fusion.png)\n\n" + result["table"]


def binding_block(result):
    return (machine_block(result) + "\n\n![the per-tensor calls through each binding](benchmarks/binding.png)\n\n"
            + result["table"])


def torch_block(result):
    r = result["results"]
    lines = ["| framework | samples/s (median of rounds) | per round |", "|---|---:|---|"]
    for name in ("single", "hvdlite", "ddp"):
        if name in r:
            lines.append(f"| {name} | {r[name]['samples_per_s']:.1f} | "
                         f"{', '.join(f'{x:.1f}' for x in r[name].get('samples_per_s_per_round', []))} |")
    ratio = r.get("hvdlite_over_ddp")
    settings = result.get("settings", {})
    text = "\n".join(lines)
    if ratio is not None:
        pairs = [h / d for h, d in zip(r["hvdlite"].get("samples_per_s_per_iter", []),
                                       r["ddp"].get("samples_per_s_per_iter", []))]
        above = sum(p >= 1.0 for p in pairs)
        text += (f"\n\n| target | measured | result |\n|---|---:|---|\n| hvdlite samples/s >= {TRAINING_TARGET}x DDP "
                 f"(gloo), 2 ranks | {ratio:.3f} | {verdict(ratio >= TRAINING_TARGET)} |")
        if pairs:
            text += (f"\n\nhvdlite and DDP take turns in one job; the ratio is the median of {len(pairs)} paired "
                     f"iterations, {above} of which favour hvdlite (per iteration: "
                     f"{', '.join(f'{p:.2f}' for p in pairs)}).")
    text += (f"\n\n- command: `python bench/torch_synthetic.py --json bench/results/torch_synthetic.json` "
             f"(rounds {settings.get('rounds', '?')}, {settings.get('num_iters', '?')} timed iterations each, batch "
             f"{settings.get('batch_size', '?')} per process); "
             f"load average {', '.join(f'{x:.1f}' for x in result.get('load_average', []))}")
    return text


def torch_ddp_block(result, across_hosts=()):
    def described(r, command):
        s = r.get("settings", {})
        for flag, default in (("num_iters", 12), ("allreduce_calls", 20)):  # the bench's defaults
            if s.get(flag, default) != default:
                command += f" --{flag.replace('_', '-')} {s[flag]}"
        if s.get("models") and s["models"] != "resnet,mlp,transformer":
            command += f" --models {s['models']}"
        if s.get("skip_allreduce"):
            command += " --skip-allreduce"
        return (f"\n\n- command: `{command}` ({s.get('num_iters', '?')} timed iterations of "
                f"{s.get('num_batches_per_iter', '?')} steps, batch {s.get('batch_size', '?')} per rank); load average "
                f"{', '.join(f'{x:.1f}' for x in r.get('load_average', []))}")
    text = (f"![torch.distributed on hvdlite](benchmarks/torch_ddp_backend.png)\n\nOne host, "
            f"{result['settings'].get('np', 2)} ranks:\n\n{result['table']}" +
            described(result, "python bench/torch_ddp_backend.py --json bench/results/torch_ddp_backend.json"))
    for record in across_hosts:
        s = record["settings"]
        text += (f"\n\n{s.get('hosts')} simulated hosts x 1 rank, links shaped to {s.get('rate_mbit')} Mbit/s:\n\n"
                 f"{record['table']}" +
                 described(record, f"sudo python bench/torch_ddp_backend.py --hosts {s.get('hosts')} --rate-mbit "
                                   f"{s.get('rate_mbit')} --json "
                                   f"bench/results/torch_ddp_backend_{s.get('hosts')}hosts.json"))
    return text


def tf_block(result):
    results = result.get("results", [])
    by_name = {r.get("framework"): r for r in results}
    base = by_name.get("mwms-loop")
    lines = ["| job | samples/s | x MultiWorkerMirroredStrategy |", "|---|---:|---:|"]
    for r in results:
        ratio = f"{r['samples_per_second'] / base['samples_per_second']:.2f}" if base else ""
        lines.append(f"| {r.get('framework')} | {r.get('samples_per_second', 0):.1f} | {ratio} |")
    settings = result.get("settings", {})
    return "\n".join(lines) + (f"\n\n- command: `python bench/tf_synthetic.py --json bench/results/tf_synthetic.json` "
                               f"(model {settings.get('model', '?')}, batch {settings.get('batch_size', '?')} per "
                               f"process, {settings.get('np', '?')} processes)")


def autotune_block(result):
    return (f"![autotune](benchmarks/autotune.png)\n\n{result['table']}\n\n- command: `{result['command']}`; "
            f"trials logged to `{result['log']}`; load average "
            f"{', '.join(f'{x:.1f}' for x in result.get('load_average', []))}")


def multihost_block(result):
    text = hosts_block(result, f"4 simulated hosts (network namespaces), MPICH's {result.get('network', '?')} layer "
                               "over TCP", "multihost.png", "across hosts")
    switches = [c for c in result.get("crossovers", []) if c["rate_mbit"]]
    if switches:
        text += "\n\nFrom which size hvdlite's own algorithm is no slower than MPI_Allreduce (within 5%) at every " \
                "larger size, on the shaped links: " + ", ".join(
                    f"{c['layout']} {c['bytes'] >> 10 if c['bytes'] else '-'} KiB" for c in switches) + "."
    return text


def hosts_block(result, what, plot, alt):
    """The block of a benchmark across simulated hosts: machine and links (what), revision, command, plot, table."""
    m = result.get("machine", {})
    lines = [f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores; {what}",
             f"- revision {m.get('git', '')}, {m.get('date', '')}, {m.get('seconds', '?')} s",
             f"- command: `sudo {m.get('command', '')}`"]
    return "\n".join(lines) + f"\n\n![{alt}](benchmarks/{plot})\n\n" + result["table"]


def scale_block(result):
    hosts = ", ".join(str(row["hosts"]) for row in result["rows"])
    return hosts_block(result, f"{hosts} simulated hosts (network namespaces) of one rank each, links shaped to "
                               f"{result.get('rate_mbit') or 'unshaped'} Mbit/s, MPICH's {result.get('network', '?')} "
                               "layer over TCP", "scale.png", "scale")


def scale_model_block(result):
    return ("- command: `" + result["command"] + "`\n\n![a step's communication against the number of hosts]"
            "(benchmarks/scale_model.png)\n\n```\n" + result["table"] + "\n```")


def elastic_commit_rows(result):
    rows = ["| model | committed state, MB | step, ms | added by a commit, ms | commit / step | added by Horovod's "
            "commit, ms | Horovod's / step | bare copy / step |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows += [f"| {r['model']} | {r['state_mb']:.2f} | {r['step_ms']:.2f} | {r['commit_ms']:.2f} | "
             f"{r['commit_per_step']:.2f} | {r['horovod_commit_ms']:.2f} | {r['horovod_commit_per_step']:.2f} | "
             f"{r['copy_per_step']:.2f} |" for r in result["rows"]]
    return "\n".join(rows)


def elastic_commit_block(result, on_gpu=None):
    """The CPU record (2 ranks) and, where one was made on a GPU machine (`make bench` cannot rerun it), the GPU's."""
    text = (machine_block(result) + "\n\n![elastic commits](benchmarks/elastic_commit.png)\n\n"
            + elastic_commit_rows(result))
    if on_gpu:
        m = on_gpu["machine"]
        text += (f"\n\nOn a GPU ({m.get('gpu', '?')}; torch {m.get('torch', '')}, {m.get('cores', '?')} CPU cores; "
                 f"one rank; the bare copy into pinned host memory):\n\n![elastic commits on a GPU]"
                 f"(benchmarks/elastic_commit_gpu.png)\n\n" + elastic_commit_rows(on_gpu)
                 + f"\n\n- revision {m.get('git', '')}, {m.get('date', '')}; {on_gpu.get('repeats', '?')} rounds per "
                 f"figure; command: `{m.get('command', '')}`")
    return text


GPU_ALLREDUCES = {"gpu_allreduce": "time-sliced", "gpu_allreduce_mps": "MPS"}
# The same runs on another card, kept beside the first card's record: training ratios and the time-sliced all-reduce.
H200_RECORDS = {"training": "gpu_training_h200", "allreduce": "gpu_allreduce_h200"}


def gpu_block(allreduces, training, plot="benchmarks/gpu.png"):
    """The GPU figures (tests/gpu/run.sh's bench and bench/torch_synthetic.py --device cuda, run on a GPU machine:
    `make bench` has none to rerun them, this only renders their JSON). ``allreduces``: label -> record."""
    m = (training or next(iter(allreduces.values())))["machine"]
    text = (f"- machine: {m.get('gpu', '?')}, {m.get('cores', '?')} CPU cores; torch {m.get('torch', '')}, NCCL "
            f"{m.get('nccl', '')}, {m.get('mpi', '')}, Python {m.get('python', '')}\n"
            f"- one GPU: 2 ranks share it, each as its own NCCL host (NCCL_HOSTID; NCCL before 2.30 refuses two "
            f"ranks of one host on one GPU), connected by NCCL's socket transport, the same for both frameworks\n")
    if plot:
        text += f"\n![GPU]({plot})\n"
    if training:
        text += ("\n| setup | model (parameters) | hvdlite samples/s | DDP (NCCL) samples/s | hvdlite / DDP |\n"
                 "|---|---|---:|---:|---:|\n")
        text += "\n".join(f"| {r['setup']} | {r['model']} ({r['parameters']:,}) | {r['hvdlite_samples_per_s']:.0f} | "
                          f"{r['ddp_samples_per_s']:.0f} | {r['hvdlite_over_ddp']:.3f} |" for r in training["runs"])
        text += f"\n\n- revision {m.get('git', '')}, {m.get('date', '')}; command: `{m.get('command', '')}`\n"
    if allreduces:
        text += ("\n| 2 ranks | all-reduce | hvdlite ms | torch.distributed ms | ratio | hvdlite GB/s | torch GB/s |\n"
                 "|---|---:|---:|---:|---:|---:|---:|\n")
        text += "\n".join(f"| {label} | {r['bytes'] >> 20} MiB | {r['hvdlite_ms']:.3f} | "
                          f"{r['torch_ms']:.3f} | {r['ratio']:.2f} | {r['hvdlite_busbw_gbs']:.1f} | "
                          f"{r['torch_busbw_gbs']:.1f} |" for label, result in allreduces.items() for r in result["rows"])
        text += "\n"
        for label, result in allreduces.items():
            a = result["machine"]
            text += (f"\n- {label}: revision {a.get('git', '')}, {a.get('date', '')}; command: "
                     f"`{a.get('command', '')}`")
    return text


def plot_gpu(allreduces, training, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if training:
        runs = training["runs"]
        labels = [f"{r['setup'].replace(', ', chr(10))}\n{r['model']}" for r in runs]
        left.bar(range(len(runs)), [r["hvdlite_over_ddp"] for r in runs],
                 color=["tab:blue" if r["hvdlite_over_ddp"] >= 1 else "tab:orange" for r in runs])
        left.axhline(1.0, color="black", linewidth=0.8)
        left.set_xticks(range(len(runs)), labels, fontsize=7)
        left.set_ylabel("training samples/s, hvdlite / DDP (NCCL)")
        left.set_title("DistributedOptimizer vs DDP, ResNet-like")
    for name, result in allreduces.items():
        rows = result["rows"]
        right.plot([r["bytes"] >> 20 for r in rows], [r["ratio"] for r in rows], marker="o", label=GPU_ALLREDUCES[name])
    if allreduces:
        right.legend()
        right.axhline(1.0, color="black", linewidth=0.8)
        right.set_xscale("log", base=2)
        right.set_xlabel("all-reduce size, MiB")
        right.set_ylabel("time, hvdlite / torch.distributed")
        right.set_title("all-reduce of CUDA tensors, 2 ranks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_block(results):
    rows = ["| target | measured | result |", "|---|---:|---|"]
    for name in ("allreduce", "fusion", "multihost", "scale"):
        if results.get(name):
            for check in results[name]["targets"]:
                rows.append(f"| {check['target']} | {check['measured']} | {verdict(check['pass'])} |")
    torch = results.get("torch_synthetic")
    if torch and torch["results"].get("hvdlite_over_ddp") is not None:
        ratio = torch["results"]["hvdlite_over_ddp"]
        rows.append(f"| torch_synthetic: hvdlite samples/s >= {TRAINING_TARGET}x DDP (gloo) | {ratio:.3f} | "
                    f"{verdict(ratio >= TRAINING_TARGET)} |")
    return "\n".join(rows)


def spark_estimator_block(result):
    m = result.get("machine", {})
    return (f"- machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores; a local Spark\n"
            f"- revision {m.get('git', '')}, {m.get('date', '')}, {m.get('seconds', '?')} s\n"
            f"- command: `{m.get('command', '')}`\n\n" + result["table"])


def carried_rounds_block(result):
    return hosts_block(result, f"simulated hosts (network namespaces), links shaped to {result.get('rate_mbit', '?')} "
                               f"Mbit/s, MPICH's {result.get('network', '?')} layer; backward pass "
                               f"{result.get('backward_ms', '?')} ms of computation", "carried_rounds.png",
                       "carried rounds")


def plot_all(results):
    sys.path.insert(0, HERE)
    if results.get("allreduce"):
        import allreduce
        allreduce.plot(results["allreduce"]["rows"], os.path.join(PLOTS, "allreduce.png"),
                       results["allreduce"]["machine"]["ranks"])
    if results.get("fusion"):
        import fusion
        fusion.plot(results["fusion"], os.path.join(PLOTS, "fusion.png"))
    if results.get("binding"):
        import binding
        binding.plot(results["binding"], os.path.join(PLOTS, "binding.png"))
    if results.get("torch_ddp_backend"):
        import torch_ddp_backend
        torch_ddp_backend.plot(os.path.join(PLOTS, "torch_ddp_backend.png"), results["torch_ddp_backend"]["results"])
    if results.get("multihost"):
        import multihost
        multihost.plot(results["multihost"]["rows"], os.path.join(PLOTS, "multihost.png"))
    if results.get("scale"):
        import scale
        scale.plot(results["scale"]["rows"], os.path.join(PLOTS, "scale.png"))
    if results.get("scale_model"):
        import scale_model
        scale_model.plot(results["scale_model"]["predictions"], os.path.join(PLOTS, "scale_model.png"))
    if results.get("carried_rounds"):
        import carried_rounds
        carried_rounds.plot(results["carried_rounds"]["rows"], os.path.join(PLOTS, "carried_rounds.png"))
    allreduces = {name: results[name] for name in GPU_ALLREDUCES if results.get(name)}
    if results.get("gpu_training") or allreduces:
        plot_gpu(allreduces, results.get("gpu_training"), os.path.join(PLOTS, "gpu.png"))
    # elastic_commit.plot needs no MPI job: it is drawn by bench/elastic_commit.py --plot (importing that module
    # here would start one).


def replace_block(text, name, body):
    pattern = re.compile(rf"(<!-- bench:{name} -->\n)(?:.*?\n)?(<!-- /bench:{name} -->)", re.S)
    if not pattern.search(text):
        return text
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)


def main():
    results = {name: load(name) for name in ("allreduce", "fusion", "binding", "torch_synthetic", "torch_ddp_backend",
                                             "torch_ddp_backend_2hosts", "torch_ddp_backend_4hosts", "tf_synthetic",
                                             "autotune",
                                             "multihost", "scale", "scale_model", "carried_rounds", "elastic_commit", "elastic_commit_gpu",
                                             "gpu_training", "spark_estimator",
                                             *GPU_ALLREDUCES, *H200_RECORDS.values())}
    with open(DOC) as f:
        text = f.read()
    text = replace_block(text, "summary", summary_block(results))
    for name, render in (("allreduce", allreduce_block), ("fusion", fusion_block), ("binding", binding_block),
                         ("torch_synthetic", torch_block),
                         ("torch_ddp_backend", lambda r: torch_ddp_block(r, [
                             results[name] for name in ("torch_ddp_backend_2hosts", "torch_ddp_backend_4hosts")
                             if results[name]])),
                         ("tf_synthetic", tf_block), ("autotune", autotune_block), ("multihost", multihost_block),
                         ("scale", scale_block), ("scale_model", scale_model_block),
                         ("carried_rounds", carried_rounds_block), ("spark_estimator", spark_estimator_block),
                         ("elastic_commit", lambda r: elastic_commit_block(r, results["elastic_commit_gpu"]))):
        if results[name]:
            text = replace_block(text, name, render(results[name]))
    allreduces = {label: results[name] for name, label in GPU_ALLREDUCES.items() if results[name]}
    if results["gpu_training"] or allreduces:
        text = replace_block(text, "gpu", gpu_block(allreduces, results["gpu_training"]))
    h200 = {kind: results[name] for kind, name in H200_RECORDS.items()}
    if h200["training"] or h200["allreduce"]:
        text = replace_block(text, "gpu_h200", gpu_block({"time-sliced": h200["allreduce"]} if h200["allreduce"] else {},
                                                         h200["training"], plot=None))
    with open(DOC, "w") as f:
        f.write(text)
    print(f"updated {os.path.relpath(DOC, ROOT)}")
    try:
        plot_all(results)
    except ImportError as error:  # matplotlib missing: tables still refreshed
        print(f"plots skipped: {error}")


if __name__ == "__main__":
    main()
