"""hvdliterun: a thin front over the MPI library's own mpiexec (`python -m hvdlite.run` is the same).

The package is also horovod.run, the launcher as a function: ``hvdlite.run(func, args=(), num_proc=2, ...)``, or
``from hvdlite.run import run`` as from horovod.runner, runs ``func`` on every rank and returns their return values
(function_runner.py). A module cannot be called, so this one's class is changed to one that can; what it holds is
unchanged.
"""
import sys
import types


def run(func, *args, **kwargs):
    """Runs ``func`` on every rank of a job and returns their return values by rank: function_runner.run."""
    from .function_runner import run as run_function
    return run_function(func, *args, **kwargs)


class _CallableLauncher(types.ModuleType):
    def __call__(self, func, *args, **kwargs):
        return run(func, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableLauncher
