"""Shared by the torch worker scripts that pytest launches under mpiexec.

Each check is recorded with its name; a failing check prints at once (with the rank) and the worker exits
non-zero at the end. Every rank prints one final line ``TORCH-WORKER rank=R checks=N failures=F`` that the
pytest side counts.
"""
import os
import sys
import time
import traceback

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402
from mpi4py import MPI  # noqa: E402

RANK = MPI.COMM_WORLD.Get_rank()

torch.set_num_threads(1)


class Checks:
    def __init__(self):
        self.count = 0
        self.failures = []
        self.started = time.time()

    def check(self, name, ok, detail=""):
        self.count += 1
        if not ok:
            message = f"[rank {RANK}] FAIL {name}: {detail}"
            print(message, flush=True)
            self.failures.append(message)
        return ok

    def close(self, a, b, name, rtol=0.0, atol=0.0):
        """Checks that ``a`` (tensor or array) equals the float64 reference ``b`` within tolerances."""
        a = a.detach().cpu().to(torch.float64).numpy() if torch.is_tensor(a) else np.asarray(a, dtype=np.float64)
        b = b.detach().cpu().to(torch.float64).numpy() if torch.is_tensor(b) else np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            return self.check(name, False, f"shape {a.shape} != reference {b.shape}")
        ok = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False)
        detail = "" if ok else f"max abs err {np.max(np.abs(a - b)) if a.size else 0}, got {a.ravel()[:6]}, " \
                               f"want {b.ravel()[:6]}"
        return self.check(name, ok, detail)

    def raises(self, label, error_type, function, /, *args, **kwargs):
        try:
            function(*args, **kwargs)
        except error_type as e:
            self.check(label, True)
            return e
        except Exception as e:  # the wrong type
            self.check(label, False, f"raised {type(e).__name__}: {e}, wanted {error_type.__name__}")
            return e
        self.check(label, False, f"did not raise {error_type.__name__}")
        return None

    def run(self, section):
        """Runs one section; an unexpected exception is a failure of that section."""
        try:
            section(self)
        except Exception:
            self.check(section.__name__, False, "raised\n" + traceback.format_exc())

    def finish(self):
        print(f"TORCH-WORKER rank={RANK} checks={self.count} failures={len(self.failures)} "
              f"seconds={time.time() - self.started:.1f}", flush=True)
        hvd.shutdown()
        sys.exit(1 if self.failures else 0)


def rank_generator(rank, salt=0):
    """A generator whose stream every rank can reproduce for any rank (for independent references)."""
    return torch.Generator().manual_seed(1000 * rank + 17 + salt)
