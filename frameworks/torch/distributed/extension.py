"""The C++ part of the torch.distributed backend, compiled against the PyTorch that is installed, and loaded.

A c10d backend must be a C++ subclass of ``c10d::Backend`` (DDP asks for one), and a C++ extension only loads into the
PyTorch it was compiled against. It is built once per PyTorch version and installation of hvdlite, ahead of use
(``python -m hvdlite.torch.build``, which ``make`` and the images run) or, failing that, the first time a process group
is made (builder.py), into a folder that every later run loads it from: no compiler and no ninja are needed to load
it. What it was built from is kept beside it (its fingerprint), so a change of PyTorch or of the sources builds it
again, and nothing else does, whatever the environment of the program that loads it. See docs/decisions for why.
"""
import importlib.util
import sys

from .library_cache import MODULE_NAME, built_library, cache_dir, fingerprint

_module = None


def import_library(path):
    """Imports the built backend module from its file (a pybind11 module of torch's extension builder)."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module


def load():
    """The compiled module: loaded from the cache folder where it was built for this PyTorch and these sources, else
    compiled there first (builder.py: once, whichever process of the machine gets there first)."""
    global _module
    if _module is None:
        folder, expected = cache_dir(), fingerprint()
        library = built_library(folder, expected)
        if library is None:
            from . import builder
            library = builder.build(folder, expected)
        _module = import_library(library)
    return _module
