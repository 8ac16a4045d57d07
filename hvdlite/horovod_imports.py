"""Horovod's import names for a Horovod script that is not to be edited: ``horovod`` and ``horovod.<x>`` resolve
to ``hvdlite`` and ``hvdlite.<x>``, the very same modules.

    python -m hvdlite.horovod_imports train.py ARGS...            # runs train.py as `python train.py ARGS...`
    hvdliterun -np 4 python -m hvdlite.horovod_imports train.py

or ``import hvdlite.horovod_imports`` before the script's own imports. A name hvdlite has no module for
(``horovod.mxnet``, say) raises ModuleNotFoundError naming both. The names are this process's only: what a script
sends to other processes (a model, a loss function, an Estimator's training) refers to hvdlite's modules, so
Spark's executors and Ray's actors need nothing of this. A Horovod installed beside hvdlite is hidden from the
process that imports this module, and from no other.
"""
import importlib
import importlib.abc
import importlib.util
import os
import runpy
import sys

HOROVOD = "horovod"


class _SameModule(importlib.abc.Loader):
    """Loads a Horovod name as hvdlite's module already imported: module_from_spec keeps the module's own
    __name__, __spec__ and __path__ (it sets only those missing), so hvdlite's module is unchanged."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


class HorovodNames(importlib.abc.MetaPathFinder):
    """Finds ``horovod[.<x>]`` as ``hvdlite[.<x>]``; first on sys.meta_path, so it wins over an installed Horovod."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != HOROVOD and not fullname.startswith(HOROVOD + "."):
            return None
        name = "hvdlite" + fullname[len(HOROVOD):]
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as missing:
            if missing.name != name:  # hvdlite's module exists and lacks something of its own: say that
                raise
            raise ModuleNotFoundError(f"No module named {fullname!r}: hvdlite has no {name} for it",
                                      name=fullname) from None
        return importlib.util.spec_from_loader(fullname, _SameModule(module), is_package=hasattr(module, "__path__"))


def install():
    """Makes ``import horovod...`` give hvdlite's modules in this process (once; later calls change nothing)."""
    if not any(isinstance(finder, HorovodNames) for finder in sys.meta_path):
        sys.meta_path.insert(0, HorovodNames())


install()


def main(argv=None):
    """``python -m hvdlite.horovod_imports SCRIPT [ARGS...]``: runs SCRIPT as its own ``__main__``, as ``python
    SCRIPT ARGS...`` would (sys.argv, sys.path[0] the script's folder), with Horovod's names installed."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2 if not argv else 0
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
