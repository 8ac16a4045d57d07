"""What an elastic commit costs a training loop: a training step of a model (forward, backward, the
DistributedOptimizer's all-reduce and update) against the same step followed by ``state.commit()`` of its
TorchState (model and SGD-momentum state copied into each host's memory, written to its disk in the background),
and against the step followed by what Horovod's TorchState.commit() does, rebuilt here on hvdlite because Horovod
does not build against current PyTorch: deep copies of the model's and the optimizer's state dicts (kept in the
process only) and a broadcast of rank 0's host-update time (its check_host_updates). Timed in interleaved rounds
on 2 ranks, for MLPs from 0.1 to 100 MB of parameters (little computation per parameter: the hardest case for a
commit) and small CNNs on 32x32 images (much more). The figures are the time each commit adds to a step, as a
fraction of the step, and the least a commit that keeps a copy can add: the step followed by one copy of the
state's tensors into buffers kept for them (torch._foreach_copy_, no state dict walked, nothing pickled).

With --device cuda the models train on the GPU, one rank (a one-GPU machine: ranks sharing a GPU would time its
sharing), and the bare copy goes from the GPU into pinned host buffers, waited for (what a commit that leaves the
GPU before it returns costs at least); a commit copies the state within the GPU and moves it to the host in the
background (docs/elastic.md). The records are elastic_commit_gpu.json and .png.

    python bench/elastic_commit.py [--device cpu|cuda] [--quick] [--json out.json] [--plot [out.png]]
"""
import argparse
import copy
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def device_argument(parser):
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models train")
    return parser


DEVICE = device_argument(argparse.ArgumentParser(add_help=False)).parse_known_args()[0].device
common.relaunch_under_mpiexec(1 if DEVICE == "cuda" else 2)

import torch  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402
from hvdlite.elastic import commits  # noqa: E402

BATCH = 32


def model_of(megabytes):
    """An MLP of about `megabytes` MB of float32 parameters (two square layers and a small head)."""
    width = int((megabytes * 2**20 / 4 / 2) ** 0.5)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10)), width


def cnn_of(width):
    """A small CNN on 32x32x3 images: three 3x3 convolutions of `width` channels, pooled, and a linear head."""
    layers = [torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(width, 2 * width, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
              torch.nn.Conv2d(2 * width, 4 * width, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
              torch.nn.Flatten(), torch.nn.Linear(4 * width, 10)]
    return torch.nn.Sequential(*layers)


def measure(kind, size, repeats, budget, device):
    torch.manual_seed(0)
    if kind == "mlp":
        model, width = model_of(size)
        x = torch.randn(BATCH, width)
    else:
        model, x = cnn_of(size), torch.randn(BATCH, 3, 32, 32)
    model, x, y = model.to(device), x.to(device), torch.randint(0, 10, (BATCH,)).to(device)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    # The training stream's work counted in the step's time, as a loop that reads its loss waits for it; not the
    # whole device's, which would count a commit's transfer to the host going on beside the next step.
    finish = torch.cuda.current_stream(device).synchronize if device.type == "cuda" else (lambda: None)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        finish()  # the GPU's work counted in the step's time

    def step_and_commit():
        step()
        state.commit()

    horovod_saved = {}

    def step_and_horovod_commit():
        step()
        horovod_saved["model"] = copy.deepcopy(model.state_dict())
        horovod_saved["optimizer"] = copy.deepcopy(optimizer.state_dict())
        horovod_saved["values"] = {"epoch": state.epoch, "batch": state.batch}
        hvd.broadcast_object(0, root_rank=0)
        finish()

    step()  # the optimizer's state exists before the first commit
    live = [p.data for p in model.parameters()] + [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    copies = [torch.empty(t.shape, dtype=t.dtype, pin_memory=device.type == "cuda") for t in live]

    def step_and_copy():
        step()
        if device.type == "cuda":
            for target, t in zip(copies, live):
                target.copy_(t, non_blocking=True)
            finish()
        else:
            torch._foreach_copy_(copies, live)

    rounds = common.interleaved({"step": step, "step+commit": step_and_commit, "step+horovod": step_and_horovod_commit,
                                 "step+copy": step_and_copy}, repeats, budget)
    parameters = sum(p.numel() for p in model.parameters())

    def added(name):
        return 1e3 * common.median([c - s for c, s in zip(rounds[name], rounds["step"])])

    return {"model": f"{kind} {size}", "state_mb": 2 * parameters * 4 / 2**20,
            "step_ms": 1e3 * common.median(rounds["step"]),
            "commit_ms": added("step+commit"),
            "commit_per_step": common.median_ratio(rounds["step+commit"], rounds["step"]) - 1.0,
            "horovod_commit_ms": added("step+horovod"),
            "horovod_commit_per_step": common.median_ratio(rounds["step+horovod"], rounds["step"]) - 1.0,
            "copy_ms": added("step+copy"),
            "copy_per_step": common.median_ratio(rounds["step+copy"], rounds["step"]) - 1.0}


COMMITS = (("commit_per_step", "state.commit()", "o-"), ("horovod_commit_per_step", "Horovod's commit", "s:"),
           ("copy_per_step", "a bare copy of the state", "^-."))


def plot(path, result):
    """The time each commit adds to a step, as a fraction of the step, by committed state: MLPs and CNNs."""
    rows, on_gpu = result["rows"], result.get("device") == "cuda"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
    for ax, (kind, title) in zip(axes, (("mlp", "MLPs (little compute per parameter)"),
                                        ("cnn", "small CNNs, 32x32 images"))):
        mine = [r for r in rows if r["model"].startswith(kind)]
        sizes = [r["state_mb"] for r in mine]
        for key, label, style in COMMITS:
            label += " (GPU to pinned host memory)" if on_gpu and key == "copy_per_step" else ""
            ax.semilogx(sizes, [max(r[key], 0.0) for r in mine], style, label=label)
        ax.set_xticks(sizes, [f"{size:.3g}" for size in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("committed state (parameters + momentum), MB")
        ax.grid(True, alpha=0.3)
    ranks = result["machine"]["ranks"]
    axes[0].set_ylabel(f"time added / training step\n(median, {ranks} rank{'s' if ranks > 1 else ''})")
    axes[1].legend(fontsize=8, loc="upper right")  # the CNN panel keeps its upper half free
    fig.suptitle("What a commit after every step costs" + (f" on a GPU ({result['machine']['gpu']})" if on_gpu else ""))
    common.save_figure(fig, path)


def main():
    parser = device_argument(common.base_arguments("elastic commit cost",
                                                   "elastic_commit_gpu" if DEVICE == "cuda" else "elastic_commit"))
    # 21 rounds, not 7: on a shared VM the MLP figures moved from 0.16 to 0.40 between 7-round runs of one build,
    # 0.35-0.42 over three of 21.
    parser.set_defaults(repeats=21)
    args = parser.parse_args()
    models = [("mlp", mb) for mb in ([0.1, 1, 10] if args.quick else [0.1, 1, 10, 100])]
    models += [("cnn", width) for width in ([16] if args.quick else [16, 32, 64])]
    hvd.init()
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    own_folder = "HVDLITE_ELASTIC_COMMIT_DIR" not in os.environ  # one of this rank's, removed at the end
    if own_folder:
        os.environ["HVDLITE_ELASTIC_COMMIT_DIR"] = tempfile.mkdtemp(prefix="hvdlite-bench-commit-")
    rows = []
    common.say(f"{'model':>9} {'state MB':>9} {'step ms':>9} {'commit ms':>10} {'commit/step':>12} "
               f"{'Horovod ms':>11} {'Horovod/step':>13} {'copy/step':>10}  (time added to a step)")
    for kind, size in models:
        row = measure(kind, size, 3 if args.quick else args.repeats, args.budget, device)
        rows.append(row)
        common.say(f"{row['model']:>9} {row['state_mb']:9.2f} {row['step_ms']:9.2f} {row['commit_ms']:10.2f} "
                   f"{row['commit_per_step']:12.2f} {row['horovod_commit_ms']:11.2f} "
                   f"{row['horovod_commit_per_step']:13.2f} {row['copy_per_step']:10.2f}")
    # The commits go, as hvd.elastic.run removes them when a job ends: left, the memory slots would keep the
    # largest state's pages (twice) in /dev/shm after the benchmark.
    common.COMM.Barrier()
    if commits.writes_here():
        commits.remove()
    if own_folder:
        shutil.rmtree(os.environ["HVDLITE_ELASTIC_COMMIT_DIR"], ignore_errors=True)
    machine = common.machine_info()
    if device.type == "cuda":
        machine["gpu"] = torch.cuda.get_device_name(device)
    result = {"machine": machine, "device": args.device, "repeats": args.repeats, "rows": rows,
              "commit_dir": os.environ["HVDLITE_ELASTIC_COMMIT_DIR"]}
    common.write_json(args.json, result)
    if args.plot and common.rank() == 0:  # docs/benchmarks/elastic_commit.png (_gpu.png) by default
        plot(args.plot, result)


if __name__ == "__main__":
    main()
