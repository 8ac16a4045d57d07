"""PyTorch + hvdlite on Ray: torch_digits.py's training run by a RayExecutor, its ranks in Ray actors.

    python examples/ray_torch_digits.py --num-workers 2                 # a local Ray of its own
    python examples/ray_torch_digits.py --num-workers 8 --address auto  # a running Ray cluster

The driver places one actor per rank (a placement group), starts the ranks in them and runs torch_digits.train on
every rank: each trains on its shard with DistributedOptimizer, and run() returns every rank's (size, test
accuracy), in rank order. A Horovod script does the same with horovod.ray.RayExecutor.
"""
import argparse
import json
import os
import sys

import cloudpickle
import ray

from hvdlite.ray import RayExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_digits  # noqa: E402

# The actors cannot import this folder's modules: torch_digits travels with the function, as a notebook's code does.
cloudpickle.register_pickle_by_value(torch_digits)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=2, help="ranks (Ray actors)")
    parser.add_argument("--address", help="a running Ray cluster's address (default: start a local one)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="rows per rank and step")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", help="write the result (size, test accuracy) to this file")
    return parser.parse_args()


def main():
    args = parse_args()
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_workers, include_dashboard=False)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=args.num_workers,
                           cpus_per_worker=1)
    executor.start(extra_env_vars={"OMP_NUM_THREADS": "1"})
    try:
        size, accuracy = executor.run(torch_digits.train, kwargs={"epochs": args.epochs,
                                                                  "batch_size": args.batch_size,
                                                                  "seed": args.seed})[0]
    finally:
        executor.shutdown()
        ray.shutdown()
    print(f"ranks={size} test_accuracy={accuracy:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as stream:
            json.dump({"size": size, "test_accuracy": accuracy}, stream)


if __name__ == "__main__":
    main()
