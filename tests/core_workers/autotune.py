"""Training-like traffic with HVDLITE_AUTOTUNE=1: every step all-reduces a set of gradients of mixed sizes
and dtypes (async, then synchronized), long enough for the autotuner to try every candidate and settle.
The tuned fusion threshold changes in the middle of the run on every rank at once; every result is checked
against a float64 reference. argv[1]: steps. Prints 'WORKER OK' per rank.
"""
import sys

import hvdlite as hvd
from reference import check_close, rank_input, reduce_reference

# 1.2 MiB of float32 gradients in one tensor: a 1 MiB threshold and a 4 MiB one fuse differently.
GRADIENTS = [("float32", (300, 1024)), ("float32", (4097,)), ("float64", (2000,)), ("float32", (64, 64)),
             ("float16", (999,)), ("float32", (128,)), ("float32", (200, 1500)), ("float64", (3,)),
             ("float32", (70001,)), ("float32", (10,))]


def main():
    steps = int(sys.argv[1])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(steps):
        seed = step % 5  # a few distinct inputs, so references can be computed once per seed
        handles = []
        for i, (dtype, shape) in enumerate(GRADIENTS):
            x = rank_input(dtype, shape, rank, "average", (i, seed))
            handles.append(hvd.allreduce_async(x, name=f"grad.{i}", op=hvd.Average))
        for (i, (dtype, shape)), handle in zip(enumerate(GRADIENTS), handles):
            got = hvd.synchronize(handle)
            expected = reduce_reference([rank_input(dtype, shape, r, "average", (i, seed)) for r in range(size)],
                                        "average")
            check_close(f"grad.{i} step {step}", got, expected, dtype, "allreduce")
    hvd.shutdown()
    print("WORKER OK", flush=True)


if __name__ == "__main__":
    main()
