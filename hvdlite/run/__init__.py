"""hvdliterun: a thin front over the MPI library's own mpiexec (`python -m hvdlite.run` is the same).

The package is also horovod.run, the launcher as a function: ``hvdlite.run(func, args=(), num_proc=2, ...)`` runs
``func`` on every rank and returns their return values (function_runner.py). A module cannot be called, so this
one's class is changed to one that can; what it holds is unchanged.
"""
import sys
import types


class _CallableLauncher(types.ModuleType):
    def __call__(self, func, *args, **kwargs):
        from .function_runner import run
        return run(func, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableLauncher
