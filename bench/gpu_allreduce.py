"""All-reduce of CUDA tensors: hvdlite (its NCCL path) against torch.distributed with the NCCL backend, the same
float32 tensors of 1 to 256 MiB on the same ranks, timed in interleaved rounds to the end of the GPU work. The
figure is hvdlite's time over torch.distributed's (below 1: hvdlite is faster), with each one's bus bandwidth
(bytes x 2(n-1)/n per second, NCCL's own measure).

    mpiexec -n N python bench/gpu_allreduce.py [--quick] [--json out.json] [--device cpu]

--device cpu compares on CPU tensors with the gloo backend instead (a dry run where there is no GPU).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.relaunch_under_mpiexec(2)

import torch  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402


def main():
    parser = common.base_arguments("GPU all-reduce: hvdlite vs torch.distributed (NCCL)", "gpu_allreduce")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    hvd.init()
    device = args.device
    if device == "cuda":
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        if not hvd.nccl_built():
            sys.exit(f"the NCCL path is not available: {hvd.gpu_status()}")
    dist = common.start_torch_distributed("nccl" if device == "cuda" else "gloo")
    finish = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    size = hvd.size()
    sizes = [1 << 20, 16 << 20, 256 << 20] if args.quick else [(1 << 20) << k for k in range(0, 9, 2)]
    rows = []
    common.say(f"{'bytes':>10} {'hvdlite ms':>11} {'torch ms':>9} {'ratio':>6} {'hvdlite GB/s':>13} {'torch GB/s':>11}")
    for nbytes in sizes:
        ours = torch.ones(nbytes // 4, device=device)
        theirs = torch.ones(nbytes // 4, device=device)

        def hvdlite_allreduce():
            hvd.allreduce_(ours, op=hvd.Sum, name="bench.gpu")
            finish()

        def torch_allreduce():
            dist.all_reduce(theirs)
            finish()

        rounds = common.interleaved({"hvdlite": hvdlite_allreduce, "torch": torch_allreduce},
                                    3 if args.quick else args.repeats, args.budget)
        factor = 2 * (size - 1) / size if size > 1 else 1.0
        row = {"bytes": nbytes, "hvdlite_ms": 1e3 * common.median(rounds["hvdlite"]),
               "torch_ms": 1e3 * common.median(rounds["torch"]),
               "ratio": common.median_ratio(rounds["hvdlite"], rounds["torch"])}
        row["hvdlite_busbw_gbs"] = nbytes * factor / row["hvdlite_ms"] / 1e6
        row["torch_busbw_gbs"] = nbytes * factor / row["torch_ms"] / 1e6
        rows.append(row)
        common.say(f"{common.human_bytes(nbytes):>10} {row['hvdlite_ms']:11.3f} {row['torch_ms']:9.3f} "
                   f"{row['ratio']:6.2f} {row['hvdlite_busbw_gbs']:13.1f} {row['torch_busbw_gbs']:11.1f}")
    info = common.machine_info()
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["nccl"] = hvd.gpu_status()["nccl_version"]
    common.write_json(args.json, {"machine": info, "device": device, "ranks": size, "rows": rows})
    hvd.shutdown()


if __name__ == "__main__":
    main()
