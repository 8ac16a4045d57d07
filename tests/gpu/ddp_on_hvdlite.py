"""GPU check (f) of tests/gpu/run.sh: the torch.distributed backend on CUDA tensors.

1. Collectives of the "hvdlite" backend on CUDA tensors (all-reduce with each op, broadcast, all-gathers,
   reduce-scatter, all-to-all with splits, send/recv, an async all-reduce whose future feeds more GPU work)
   against float64 references computed here.
2. DDP on the "hvdlite" backend against DDP on torch's NCCL backend: two copies of one MLP, the same batches, steps
   taken in turns; the parameters must agree within float32 tolerance after every timed round, and each
   trainer's samples/s (and their ratio) are printed and written to --json. On CUDA, also DDP with the bf16
   compression hook on both.

    mpiexec -n 2 python tests/gpu/ddp_on_hvdlite.py [--device cuda|cpu] [--json PATH]

--device cpu runs it on CPU tensors against gloo (a dry run of this script where there is no GPU). Exit code 0
when every check passed.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import hvdlite.torch  # noqa: F401  (registers the backend)

WIDTH, LAYERS, BATCH, ROUNDS, STEPS_PER_ROUND = 2048, 4, 64, 8, 5


def check_collectives(device, rank, size):
    """Every check on this rank; returns the failures."""
    failures = []

    def expect(label, got, want, tol=1e-5):
        if not torch.allclose(got.double().cpu(), want.double().cpu(), rtol=tol, atol=tol):
            failures.append(f"{label}: got {got.flatten()[:4].tolist()}, want {want.flatten()[:4].tolist()}")

    def mine(r, n=6):
        return torch.arange(n, dtype=torch.float64) + 10 * r

    everyone = torch.stack([mine(r) for r in range(size)])
    for op, want in ((dist.ReduceOp.SUM, everyone.sum(0)), (dist.ReduceOp.AVG, everyone.mean(0)),
                     (dist.ReduceOp.MIN, everyone.amin(0)), (dist.ReduceOp.MAX, everyone.amax(0)),
                     (dist.ReduceOp.PRODUCT, everyone.prod(0))):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = mine(rank).to(dtype).to(device)
            dist.all_reduce(x, op=op)
            expect(f"all_reduce {op} {dtype}", x, want.to(dtype), 1e-5 if dtype == torch.float32 else 2e-2)
    x = mine(rank).to(torch.int64).to(device)
    dist.all_reduce(x)
    expect("all_reduce int64", x, everyone.sum(0))
    x = torch.tensor([rank % 2, 1, 0], dtype=torch.int32, device=device)
    dist.all_reduce(x, op=dist.ReduceOp.BOR)
    expect("all_reduce BOR", x, torch.tensor([1 if size > 1 else 0, 1, 0]))
    y = mine(rank).to(device)
    dist.broadcast(y, src=size - 1)
    expect("broadcast", y, mine(size - 1))
    outs = [torch.empty(6, dtype=torch.float64, device=device) for _ in range(size)]
    dist.all_gather(outs, mine(rank).to(device))
    expect("all_gather", torch.stack(outs), everyone)
    flat = torch.empty(size * 6, dtype=torch.float64, device=device)
    dist.all_gather_into_tensor(flat, mine(rank).to(device))
    expect("all_gather_into_tensor", flat, everyone.flatten())
    out = torch.empty(2, dtype=torch.float64, device=device)
    dist.reduce_scatter_tensor(out, mine(rank, 2 * size).to(device))
    expect("reduce_scatter_tensor", out,
           torch.stack([mine(r, 2 * size) for r in range(size)]).sum(0)[2 * rank:2 * rank + 2])
    send = torch.cat([torch.full((rank + d + 1,), float(100 * rank + d)) for d in range(size)]).to(device)
    received = torch.empty(sum(s + rank + 1 for s in range(size)), device=device)
    dist.all_to_all_single(received, send, [s + rank + 1 for s in range(size)], [rank + d + 1 for d in range(size)])
    expect("all_to_all_single", received,
           torch.cat([torch.full((s + rank + 1,), float(100 * s + rank)) for s in range(size)]))
    if size >= 2 and rank < 2:
        message = torch.full((5,), float(rank + 1), device=device)
        if rank == 0:
            dist.send(message, dst=1)
        else:
            dist.recv(message, src=0)
            expect("send/recv", message, torch.full((5,), 1.0))
    # An async all-reduce of a tensor a kernel has just written; the future's value feeds more GPU work.
    z = torch.ones(1 << 20, device=device) * (rank + 1)
    work = dist.all_reduce(z, async_op=True)
    doubled = work.get_future().then(lambda f: f.value()[0] * 2).wait()
    expect("async all_reduce and its future", doubled[:4], torch.full((4,), float(sum(range(1, size + 1)) * 2)))
    dist.barrier()
    return failures


def mlp(device):
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10)).to(device)


def compare_ddp(device, rank, size, reference_backend):
    """DDP on hvdlite and on the reference backend, in turns; returns (failures, results)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    reference_group = dist.new_group(backend=reference_backend)
    ids = [device.index] if device.type == "cuda" else None
    trainers = {"hvdlite": DDP(mlp(device), device_ids=ids),
                reference_backend: DDP(mlp(device), device_ids=ids, process_group=reference_group)}
    optimizers = {name: torch.optim.SGD(model.parameters(), lr=0.01) for name, model in trainers.items()}
    generator = torch.Generator(device=device).manual_seed(rank)
    data = torch.randn(BATCH, WIDTH, device=device, generator=generator)
    target = torch.randint(0, 10, (BATCH,), device=device, generator=generator)
    seconds = {name: 0.0 for name in trainers}
    failures = []

    def step(name):
        optimizers[name].zero_grad()
        torch.nn.functional.cross_entropy(trainers[name](data), target).backward()
        optimizers[name].step()

    for name in trainers:  # warm-up: buckets built, NCCL communicators made
        for _ in range(3):
            step(name)
    for round_ in range(ROUNDS):
        for name in (trainers if round_ % 2 == 0 else reversed(list(trainers))):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            for _ in range(STEPS_PER_ROUND):
                step(name)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[name] += time.perf_counter() - start
        for (n1, p1), p2 in zip(trainers["hvdlite"].module.named_parameters(),
                                trainers[reference_backend].module.parameters()):
            if not torch.allclose(p1, p2, rtol=1e-4, atol=1e-5):
                failures.append(f"DDP round {round_}: parameter {n1} differs from DDP on {reference_backend} by "
                                f"{(p1 - p2).abs().max().item():.3g}")
                break
    if device.type == "cuda":  # torch allows the bf16 compression hook only where CUDA and NCCL are
        failures += compare_bf16_hook(device, data, target, reference_group, ids)
    samples = BATCH * size * STEPS_PER_ROUND * ROUNDS
    rates = {name: samples / s for name, s in seconds.items()}
    results = {"model": f"MLP {LAYERS}x{WIDTH}", "batch_per_rank": BATCH, "ranks": size,
               "samples_per_second": rates, "hvdlite_over_reference": rates["hvdlite"] / rates[reference_backend],
               "reference": reference_backend}
    return failures, results


def compare_bf16_hook(device, data, target, reference_group, ids):
    """DDP with the bf16 compression hook on hvdlite and on the reference group: a few steps, parameters within
    bfloat16's rounding of each other."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    models = [DDP(mlp(device), device_ids=ids), DDP(mlp(device), device_ids=ids, process_group=reference_group)]
    for model in models:
        model.register_comm_hook(model.process_group, default_hooks.bf16_compress_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(3):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(data), target).backward()
            optimizer.step()
    for (name, p1), p2 in zip(models[0].module.named_parameters(), models[1].module.parameters()):
        if not torch.allclose(p1, p2, rtol=1e-2, atol=1e-4):
            difference = (p1 - p2).abs().max().item()
            return [f"DDP with the bf16 compression hook: parameter {name} differs by {difference:.3g}"]
    return []


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json")
    args = parser.parse_args()
    dist.init_process_group("hvdlite")
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        reference = "nccl"
    else:
        device, reference = torch.device("cpu"), "gloo"
    failures = check_collectives(device, rank, size)
    ddp_failures, results = compare_ddp(device, rank, size, reference)
    failures += ddp_failures
    print(f"rank {rank}: " + ("ok" if not failures else "FAILED:\n  " + "\n  ".join(failures)), flush=True)
    if rank == 0:
        rates = results["samples_per_second"]
        print(f"DDP {results['model']}, batch {BATCH} per rank, {size} ranks: hvdlite {rates['hvdlite']:.0f} "
              f"samples/s, {reference} {rates[reference]:.0f} samples/s, ratio "
              f"{results['hvdlite_over_reference']:.3f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
