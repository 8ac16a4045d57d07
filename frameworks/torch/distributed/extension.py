"""The C++ part of the torch.distributed backend, compiled against the PyTorch that is installed.

A c10d backend must be a C++ subclass of ``c10d::Backend`` (DDP asks for one), and a C++ extension only loads into the
PyTorch it was compiled against. So it is compiled where it is used: the first time a process group is made, with
PyTorch's own extension builder (its headers, a C++ compiler and ninja), into a folder per PyTorch version and
installation, and loaded from there afterwards (ranks that start together wait for one build). See docs/decisions for
why.
"""
import hashlib
import os
import re

import torch
from torch.utils import cpp_extension

from hvdlite import build_info, config

CACHE_VARIABLE = config.SETTINGS_BY_NAME["torch_extension_dir"].env
SOURCES = ["placement.cc", "work.cc", "call_names.cc", "backend.cc", "bindings.cc"]
_module = None


def cache_dir():
    """Where the compiled backend is kept: $HVDLITE_TORCH_EXTENSION_DIR, else ~/.cache/hvdlite, one folder per
    PyTorch version (a PyTorch upgrade compiles it again) and per installation of hvdlite (its sources' folder: two
    environments or checkouts that shared one folder recompiled it each time the other had used it)."""
    root = config.SETTINGS_BY_NAME["torch_extension_dir"].read(os.environ) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hvdlite")
    installation = hashlib.sha1(os.path.dirname(os.path.abspath(__file__)).encode()).hexdigest()[:8]
    return os.path.join(root, "torch-" + re.sub(r"[^0-9A-Za-z.]+", "_", torch.__version__) + "-" + installation)


def load():
    """The compiled module (compiling it first where needed)."""
    global _module
    if _module is None:
        here = os.path.dirname(os.path.abspath(__file__))
        core = build_info.native_file("libhvdlite_core.so")
        header = build_info.native_file("hvdlite.h")
        if core is None or header is None:
            raise ImportError("hvdlite's native core is not built: install hvdlite with `pip install .`")
        folder = cache_dir()
        os.makedirs(folder, exist_ok=True)
        core_dir = os.path.dirname(core)
        try:
            _module = cpp_extension.load(
                name="hvdlite_c10d",
                sources=[os.path.join(here, source) for source in SOURCES],
                extra_include_paths=[here, os.path.dirname(header)],
                extra_cflags=["-O2"],
                # The core that this process has loaded already (by its soname), found again at run time.
                extra_ldflags=[os.path.join(core_dir, "libhvdlite_core.so"), f"-Wl,-rpath,{core_dir}"],
                build_directory=folder,
                verbose=bool(os.environ.get("HVDLITE_TORCH_EXTENSION_VERBOSE")))
        except (OSError, RuntimeError, ImportError) as error:
            raise RuntimeError(
                f"hvdlite could not compile its torch.distributed backend in {folder} ({error}). It needs a C++ "
                "compiler (g++) and ninja (pip install ninja) where PyTorch runs; "
                f"set {CACHE_VARIABLE} to build it elsewhere, HVDLITE_TORCH_EXTENSION_VERBOSE=1 to see the build")
    return _module
