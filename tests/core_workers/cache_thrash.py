"""A step that reduces more tensors than the response cache holds, a few per negotiation round (as gradients
become ready): the cache evicts each tensor before its next use. Results are checked on every rank against
float64 references; the test reads stderr for the warning that names the setting.

Run under mpiexec with HVDLITE_CACHE_CAPACITY set; argv[1]: tensors per step. Prints 'WORKER OK' per rank.
"""
import sys

import numpy as np

import hvdlite as hvd

TENSORS = int(sys.argv[1])
PER_ROUND = 4


def contribution(rank, i, step):
    return np.linspace(-1.0, 1.0, 8) * (rank + 1) + i + 0.25 * step


def main():
    hvd.init()
    size = hvd.size()
    for step in range(4):
        for start in range(0, TENSORS, PER_ROUND):  # each chunk waited for before the next: its own round
            chunk = range(start, min(TENSORS, start + PER_ROUND))
            handles = [hvd.allreduce_async(contribution(hvd.rank(), i, step).astype(np.float32), name=f"thrash.{i}",
                                           op=hvd.Sum) for i in chunk]
            for i, handle in zip(chunk, handles):
                expected = sum(contribution(r, i, step) for r in range(size))  # float64
                got = hvd.synchronize(handle)
                assert np.allclose(got, expected, rtol=1e-6, atol=1e-5), (i, step, got, expected)
    hvd.shutdown()
    print("WORKER OK", flush=True)


if __name__ == "__main__":
    main()
