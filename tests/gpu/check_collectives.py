"""GPU check (a) and (b) of tests/gpu/run.sh: every collective and dtype of hvdlite.torch on CUDA tensors against
float64 references computed on the CPU, on every rank; stream ordering; fusion of 256 small tensors.

    mpiexec -n N python tests/gpu/check_collectives.py [--device cuda|cpu]

--device cpu runs the same checks on CPU tensors (a dry run of this script where there is no GPU). Exit code 0
when every check passed; each failure is printed with the rank, the collective, the dtype and what differed.
"""
import argparse
import os
import sys
import zlib

import numpy as np
import torch

import hvdlite.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5, torch.float64: 1e-12}
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
failures = []


def check(what, got, expected, dtype):
    got64 = got.detach().to("cpu", torch.float64).numpy()
    tol = TOLERANCE.get(dtype)
    ok = (got64.shape == expected.shape and
          (np.allclose(got64, expected, rtol=tol, atol=tol * max(1.0, float(np.abs(expected).max(initial=0))))
           if tol else np.array_equal(got64, expected)))
    if not ok:
        failures.append(f"rank {hvd.rank()}: {what} ({dtype}): got {got64.ravel()[:6]}, expected {expected.ravel()[:6]}")


def rank_values(dtype, shape, rank, op, seed):
    """What a rank contributes (small values: integer sums and products never overflow), as float64."""
    rng = np.random.default_rng(zlib.crc32(repr((seed, rank)).encode()))  # the same in every process
    if op == "product":
        values = rng.uniform(0.5, 1.5, shape) if dtype in FLOATS else rng.integers(1, 3, shape)
    elif dtype == torch.uint8:
        values = rng.integers(0, 50, shape)
    elif dtype in FLOATS:
        values = rng.uniform(-4, 4, shape)
    else:
        values = rng.integers(-30, 30, shape)
    return torch.from_numpy(np.asarray(values, np.float64)).to(dtype).to(torch.float64).numpy()


def reference(per_rank, op, dtype, prescale=1.0, postscale=1.0):
    stacked = np.stack(per_rank) * prescale
    integer = dtype not in FLOATS
    if integer:
        stacked = np.trunc(stacked)
    out = {"sum": stacked.sum(0), "average": stacked.sum(0) / len(per_rank), "min": stacked.min(0),
           "max": stacked.max(0), "product": stacked.prod(0)}[op] * postscale
    return np.trunc(out) if integer else out


def as_tensor(values, dtype, device):
    return torch.from_numpy(values).to(dtype).to(device)


def check_allreduce(device):
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            for scales in ((1.0, 1.0), (0.5, 3.0)):
                if scales != (1.0, 1.0) and op_name not in ("sum", "average"):
                    continue
                seed = f"{dtype}.{op_name}.{scales}"
                mine = rank_values(dtype, (1031,), rank, op_name, seed)
                every = [rank_values(dtype, (1031,), r, op_name, seed) for r in range(size)]
                got = hvd.allreduce(as_tensor(mine, dtype, device), op=op, name=f"ar.{seed}",
                                    prescale_factor=scales[0], postscale_factor=scales[1])
                check(f"allreduce {op_name} scales {scales}", got, reference(every, op_name, dtype, *scales), dtype)
                t = as_tensor(mine, dtype, device)
                hvd.allreduce_(t, op=op, name=f"ar_.{seed}", prescale_factor=scales[0], postscale_factor=scales[1])
                check(f"allreduce_ in place {op_name}", t, reference(every, op_name, dtype, *scales), dtype)


def check_other_collectives(device):
    rank, size = hvd.rank(), hvd.size()
    for dtype in DTYPES:
        rows = [r + 1 for r in range(size)]
        every = [rank_values(dtype, (rows[r], 3), r, "sum", f"ag.{dtype}") for r in range(size)]
        check("allgather (rows differ by rank)",
              hvd.allgather(as_tensor(every[rank], dtype, device), name=f"ag.{dtype}"), np.concatenate(every), dtype)
        every = [rank_values(dtype, (17, 2), r, "sum", f"bc.{dtype}") for r in range(size)]
        root = size - 1
        check("broadcast", hvd.broadcast(as_tensor(every[rank], dtype, device), root, name=f"bc.{dtype}"),
              every[root], dtype)
        t = as_tensor(every[rank], dtype, device)
        hvd.broadcast_(t, root, name=f"bc_.{dtype}")
        check("broadcast_ in place", t, every[root], dtype)
        every = [rank_values(dtype, (2 * size, 3), r, "sum", f"a2a.{dtype}") for r in range(size)]
        got = hvd.alltoall(as_tensor(every[rank], dtype, device), name=f"a2a.{dtype}")
        check("alltoall", got, np.concatenate([every[r][2 * rank:2 * rank + 2] for r in range(size)]), dtype)
        every = [rank_values(dtype, (2 * size + 1, 3), r, "sum", f"rs.{dtype}") for r in range(size)]
        whole = reference(every, "sum", dtype)
        start = sum(2 + (1 if r < 1 else 0) for r in range(rank))
        mine_rows = 2 + (1 if rank < 1 else 0)
        check("reducescatter sum", hvd.reducescatter(as_tensor(every[rank], dtype, device), op=hvd.Sum,
                                                     name=f"rs.{dtype}"), whole[start:start + mine_rows], dtype)
        if device != "cpu":
            for name, out in (("allgather", hvd.allgather(as_tensor(every[rank], dtype, device), name=f"dev.{dtype}")),):
                if out.device.type != "cuda":
                    failures.append(f"rank {rank}: {name} returned a tensor on {out.device}, not on the GPU")


def check_stream_ordering(device):
    """A kernel writes the tensor on the current stream just before the all-reduce, behind a long GPU sleep, and
    nothing synchronises on the host: the all-reduce must see what it wrote, and the caller's next kernel the
    result."""
    if device == "cpu":
        return
    rank, size = hvd.rank(), hvd.size()
    for trial in range(5):
        x = torch.zeros(1 << 20, device=device)
        torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time ahead of the fill
        x.fill_(rank + 1.0 + trial)
        y = hvd.allreduce(x, op=hvd.Sum, name=f"ordered.{trial}")
        y.mul_(2)  # the caller's next kernel, on the current stream
        expected = 2 * sum(r + 1.0 + trial for r in range(size))
        got = y.cpu()
        if not torch.all(got == expected):
            failures.append(f"rank {rank}: stream ordering, trial {trial}: got {got[:4].tolist()}, expected {expected}")


def check_fusion(device):
    rank, size = hvd.rank(), hvd.size()
    every = [[rank_values(torch.float32, (i % 13 + 1,), r, "sum", f"fuse.{i}") for i in range(256)]
             for r in range(size)]
    handles = [hvd.allreduce_async(as_tensor(every[rank][i], torch.float32, device), op=hvd.Sum, name=f"fuse.{i}")
               for i in range(256)]
    for i, handle in enumerate(handles):
        check(f"fused all-reduce {i} of 256", hvd.synchronize(handle),
              reference([every[r][i] for r in range(size)], "sum", torch.float32), torch.float32)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    hvd.init()
    device = args.device
    if device == "cuda":
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        status = hvd.gpu_status()
        if not hvd.nccl_built():
            print(f"rank {hvd.rank()}: NCCL path not available: {status}", flush=True)
            sys.exit(2)
        if hvd.rank() == 0:
            print(f"NCCL {status['nccl_version']} from {status['nccl_path']}; {hvd.size()} ranks", flush=True)
    for step in (check_allreduce, check_other_collectives, check_stream_ordering, check_fusion):
        step(device)
        print(f"rank {hvd.rank()}: {step.__name__}: {'ok' if not failures else f'{len(failures)} failures'}",
              flush=True)
    for failure in failures[:40]:
        print(failure, flush=True)
    hvd.shutdown()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
