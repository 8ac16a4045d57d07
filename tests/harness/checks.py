"""The one way tests check results, for numpy, torch and TensorFlow values alike.

``assert_close`` and ``assert_raises`` (beside plain ``assert``) stop the test at the first failure. The
``checks`` fixture has the same checks as methods (``close``, ``raises``, ``true``), each with a label first,
but records each failure and goes on, so one test that walks every dtype or op reports every case that
failed; the test fails at its end, listing them.
Every comparison is made in float64 against a reference the test computes independently.
"""
import numpy as np
import pytest


def as_float64(value):
    """A numpy float64 copy of an array, list, torch tensor (any dtype, bfloat16 too) or TF tensor."""
    if type(value).__module__.startswith("torch"):
        import torch
        return value.detach().cpu().to(torch.float64).numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def closeness_problem(actual, expected, rtol=0.0, atol=0.0):
    """Why actual is not expected within the tolerances (exact when both are 0), or None if it is."""
    a, e = as_float64(actual), as_float64(expected)
    if a.shape != e.shape:
        return f"shape {a.shape} != expected {e.shape}"
    if np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
        return None
    worst = np.max(np.abs(a - e)) if a.size else 0.0
    return f"max abs diff {worst}; got {a.ravel()[:8]} expected {e.ravel()[:8]}"


def raising_problem(error_types, fn, args, kwargs, fragments):
    """(problem or None, the error raised): fn(*args, **kwargs) must raise one of error_types with every
    fragment in its message."""
    try:
        fn(*args, **kwargs)
    except error_types as error:
        message = str(error)
        missing = [f for f in fragments if f not in message]
        return (f"message lacks {missing}: {message[:600]}" if missing else None), error
    except Exception as error:  # noqa: BLE001 - the wrong type is the failure reported
        return f"raised {type(error).__name__} instead of {error_types}: {str(error)[:400]}", error
    return f"did not raise {error_types}", None


def assert_close(label, actual, expected, rtol=0.0, atol=0.0):
    __tracebackhide__ = True
    problem = closeness_problem(actual, expected, rtol, atol)
    assert problem is None, f"{label}: {problem}"


def assert_raises(error_types, fn, *args, match=(), **kwargs):
    """fn(*args, **kwargs) must raise one of error_types with every string of match in its message; returns
    the error."""
    __tracebackhide__ = True
    problem, error = raising_problem(error_types, fn, args, kwargs, match)
    assert problem is None, problem
    return error


class Checks:
    """Soft checks: each failure is recorded with its label; the test fails at its end with all of them."""

    def __init__(self):
        self.failures = []

    def true(self, label, condition, detail=""):
        if not condition:
            self.failures.append(f"{label}: {detail or 'condition is false'}")
        return bool(condition)

    def close(self, label, actual, expected, rtol=0.0, atol=0.0):
        problem = closeness_problem(actual, expected, rtol, atol)
        return self.true(label, problem is None, problem)

    def raises(self, label, error_types, fn, *args, match=(), **kwargs):
        problem, error = raising_problem(error_types, fn, args, kwargs, match)
        self.true(label, problem is None, problem)
        return error

    def raise_failures(self):
        __tracebackhide__ = True
        if self.failures:
            raise AssertionError(f"{len(self.failures)} checks failed:\n" + "\n".join(self.failures))


@pytest.fixture
def checks():
    return Checks()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    __tracebackhide__ = True
    result = yield
    recorded = pyfuncitem.funcargs.get("checks")
    if isinstance(recorded, Checks):
        recorded.raise_failures()
    return result
