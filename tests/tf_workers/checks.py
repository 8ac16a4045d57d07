"""Assertions for multi-rank TensorFlow workers: every rank checks, records each failure with its label,
prints a summary line, and exits non-zero when anything failed (so that mpiexec and the test fail)."""
import os
import sys
import traceback

import numpy as np

# Keep TensorFlow small on a 2-core machine before it is imported by the worker.
for _var, _value in (("OMP_NUM_THREADS", "1"), ("TF_NUM_INTEROP_THREADS", "1"), ("TF_NUM_INTRAOP_THREADS", "1"),
                     ("TF_CPP_MIN_LOG_LEVEL", "2")):
    os.environ.setdefault(_var, _value)


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.count = 0
        self.failures = []

    def fail(self, label, detail):
        self.failures.append(f"{label}: {detail}")

    def true(self, label, condition, detail=""):
        self.count += 1
        if not condition:
            self.fail(label, detail or "condition is false")

    def close(self, label, actual, expected, rtol=0.0, atol=0.0):
        """Compares in float64 (exactly when both tolerances are 0); shapes must match too."""
        self.count += 1
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        if actual.shape != expected.shape:
            self.fail(label, f"shape {actual.shape} != expected {expected.shape}")
            return
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
            worst = np.max(np.abs(a - e)) if a.size else 0.0
            self.fail(label, f"max abs diff {worst}; got {a.ravel()[:8]} expected {e.ravel()[:8]}")

    def raises(self, label, fn, exc_types, *fragments):
        """fn() must raise one of exc_types with every fragment in its message."""
        self.count += 1
        try:
            fn()
        except exc_types as error:
            message = str(error)
            missing = [f for f in fragments if f not in message]
            if missing:
                self.fail(label, f"message lacks {missing}: {message[:400]}")
            return message
        except Exception as error:  # noqa: BLE001 - reported as a failure with its type
            self.fail(label, f"raised {type(error).__name__} instead of {exc_types}: {str(error)[:300]}")
            return None
        self.fail(label, "did not raise")
        return None

    def guard(self, label, fn):
        """Runs a block of checks; an unexpected exception becomes one failure instead of ending the run."""
        try:
            fn()
        except Exception:  # noqa: BLE001
            self.fail(label, "unexpected exception:\n" + traceback.format_exc())

    def finish(self):
        status = "OK" if not self.failures else "FAILED"
        print(f"rank {self.rank}: {self.count} checks, {len(self.failures)} failed: {status}", flush=True)
        for failure in self.failures:
            print(f"rank {self.rank} FAIL {failure}", flush=True)
        sys.stdout.flush()
        if self.failures:
            # Without MPI_Finalize's barrier: a failing rank must not hang waiting for the others.
            os._exit(1)
        sys.exit(0)
