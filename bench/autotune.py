"""What autotune (HVDLITE_AUTOTUNE=1) finds and gains on the synthetic PyTorch training benchmark.

    python bench/autotune.py [--rounds 2] [--json PATH] [--plot [PATH]] [torch_synthetic.py options]

Runs bench/torch_synthetic.py's hvdlite job with autotune off and on, alternately (--rounds times each), long
enough for the tuner to try its candidates and settle. Throughput is compared over the last --tail timed
iterations of each run, after the tuner has settled; the tuner's CSV log (its trials) is kept next to the
JSON. The default settings it starts from are those of hvdlite/config.py. Options this script does not know
(--batch-size, --width, ...) go to torch_synthetic.py's worker.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(autotune, log_path, args, workdir):
    """Per-iteration samples/s of one hvdlite job of torch_synthetic.py (its worker, under hvdliterun)."""
    result_file = os.path.join(workdir, f"run-{autotune}.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("HVDLITE_AUTOTUNE", None)
    if autotune:
        env.update(HVDLITE_AUTOTUNE="1", HVDLITE_AUTOTUNE_LOG=log_path)
    command = [sys.executable, "-m", "hvdlite.runner", "-np", "2", sys.executable,
               os.path.join(HERE, "torch_synthetic.py"), "--worker", "hvdlite", "--result-file", result_file, "--num-iters", str(args.iters),
               "--num-batches-per-iter", "5", *args.worker_options]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0 or not os.path.exists(result_file):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"torch_synthetic.py failed (autotune={autotune})")
    with open(result_file) as f:
        return json.load(f)["hvdlite"]["samples_per_s_per_iter"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=48, help="timed iterations of 5 steps per run")
    parser.add_argument("--tail", type=int, default=8, help="last iterations compared (tuner settled)")
    parser.add_argument("--json", default=os.path.join(HERE, "results", "autotune.json"))
    parser.add_argument("--plot", nargs="?", const=os.path.join(ROOT, "docs", "benchmarks", "autotune.png"))
    args, args.worker_options = parser.parse_known_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    log_path = os.path.splitext(os.path.abspath(args.json))[0] + "_log.csv"
    tails = {False: [], True: []}
    iterations = {False: [], True: []}
    with tempfile.TemporaryDirectory() as workdir:
        for round_index in range(args.rounds):
            for autotune in (False, True):
                print(f"round {round_index + 1}/{args.rounds}: autotune {'on' if autotune else 'off'} ...", flush=True)
                per_iter = run(autotune, log_path, args, workdir)
                iterations[autotune].append(per_iter)
                tails[autotune].append(statistics.mean(per_iter[-args.tail:]))
    trials = []
    if os.path.exists(log_path):  # a run too short for the tuner's first sample logs nothing
        with open(log_path) as f:
            trials = list(csv.DictReader(f))
    settled = trials[-1] if trials and trials[-1]["phase"] == "settled" else None
    gain = statistics.median(on / off for on, off in zip(tails[True], tails[False]))
    lines = [f"hvdlite samples/s over the last {args.tail} iterations (median of {args.rounds} runs): "
             f"autotune off {statistics.median(tails[False]):.1f}, on {statistics.median(tails[True]):.1f}; "
             f"on/off {gain:.3f}"]
    if settled:
        lines.append(f"settled on fusion threshold {int(settled['fusion_threshold_bytes'])} bytes, cycle time "
                     f"{settled['cycle_time_ms']} ms after {len(trials) - 1} samples")
    else:
        lines.append(f"the tuner had not settled by the end of the run ({len(trials)} samples logged)")
    trial_rows = ["| sample | phase | fusion threshold | cycle ms | bytes/s |", "|---:|---|---:|---:|---:|"]
    for t in trials:
        trial_rows.append(f"| {t['sample']} | {t['phase']} | {int(t['fusion_threshold_bytes']) / 2**20:g} MiB | "
                          f"{t['cycle_time_ms']} | {float(t['bytes_per_second']) / 1e6:.1f} MB/s |")
    text = "\n".join(lines) + "\n\n" + "\n".join(trial_rows)
    print(text)
    payload = {"benchmark": "autotune", "load_average": os.getloadavg(), "cores": os.cpu_count(),
               "command": "python bench/autotune.py " + " ".join(sys.argv[1:]), "iterations": {
                   "off": iterations[False], "on": iterations[True]},
               "tail_samples_per_s": {"off": tails[False], "on": tails[True]}, "gain": gain, "trials": trials,
               "settled": settled, "table": text, "log": os.path.relpath(log_path, ROOT)}
    with open(args.json, "w") as f:
        json.dump(payload, f, indent=1)
    print(f"wrote {args.json}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4))
        for autotune, style in ((False, "--"), (True, "-")):
            for i, per_iter in enumerate(iterations[autotune]):
                ax.plot(range(1, len(per_iter) + 1), per_iter, style, color="C1" if autotune else "C0",
                        label=("autotune on" if autotune else "autotune off") if i == 0 else None)
        ax.set_xlabel("timed iteration (5 steps each)")
        ax.set_ylabel("samples/s (2 processes)")
        ax.legend()
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
