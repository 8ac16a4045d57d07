"""Where the compiled torch.distributed backend is kept and what it must have been built from: its cache folder, the
core it links, the fingerprint of its sources and PyTorch, and the library there if it matches. Read by extension.py
(which loads it) and builder.py (which builds it), neither importing the other for it.
"""
import hashlib
import json
import os
import re
import sysconfig

import torch

from hvdlite import build_info, config

CACHE_VARIABLE = config.SETTINGS_BY_NAME["torch_extension_dir"].env
MODULE_NAME = "hvdlite_c10d"
SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCES = ["placement.cc", "work.cc", "call_names.cc", "backend.cc", "bindings.cc"]
LIBRARY = MODULE_NAME + ".so"
STAMP = "built.json"  # the fingerprint of what the library beside it was built from


def cache_dir():
    """Where the compiled backend is kept: $HVDLITE_TORCH_EXTENSION_DIR, else ~/.cache/hvdlite, one folder per
    PyTorch version (a PyTorch upgrade compiles it again) and per installation of hvdlite (its sources' folder: two
    environments or checkouts that shared one folder recompiled it each time the other had used it)."""
    root = config.SETTINGS_BY_NAME["torch_extension_dir"].read(os.environ) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hvdlite")
    installation = hashlib.sha1(SOURCE_DIR.encode()).hexdigest()[:8]
    return os.path.join(root, "torch-" + re.sub(r"[^0-9A-Za-z.]+", "_", torch.__version__) + "-" + installation)


def native_core():
    """The core library and header that the backend is compiled against and links (this installation's)."""
    core = build_info.native_file("libhvdlite_core.so")
    header = build_info.native_file("hvdlite.h")
    if core is None or header is None:
        raise ImportError("hvdlite's native core is not built: install hvdlite with `pip install .`")
    return core, header


def fingerprint():
    """What a built backend must match to be loaded: PyTorch's version and C++ ABI, Python's extension ABI, the core it
    links, and the sources' contents (an editable install's change builds it again)."""
    core, header = native_core()
    digest = hashlib.sha256()
    for part in (torch.__version__, str(torch.compiled_with_cxx11_abi()), sysconfig.get_config_var("EXT_SUFFIX"),
                 os.path.realpath(core)):
        digest.update(part.encode() + b"\0")
    sources = sorted(name for name in os.listdir(SOURCE_DIR) if name.endswith((".cc", ".h")))
    for path in [os.path.join(SOURCE_DIR, name) for name in sources] + [header]:
        with open(path, "rb") as stream:
            digest.update(os.path.basename(path).encode() + b"\0" + stream.read())
    return digest.hexdigest()


def built_library(folder, expected):
    """The library in folder where it was built from what ``expected`` fingerprints, else None."""
    try:
        with open(os.path.join(folder, STAMP)) as stream:
            stamp = json.load(stream)
    except (OSError, ValueError):
        return None
    library = os.path.join(folder, LIBRARY)
    return library if stamp.get("fingerprint") == expected and os.path.exists(library) else None
