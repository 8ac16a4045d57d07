"""Loads the native core (libhvdlite_core.so) through cffi's ABI mode.

The declarations come from the one C header, so Python and C cannot drift apart. MPI must be loaded
before the library (mpi4py does it), so that the core binds to the same libmpi as mpi4py.
"""
import os
import re

import cffi

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_HEADER_CANDIDATES = (
    os.path.join(_PACKAGE_DIR, "hvdlite.h"),                                  # installed copy
    os.path.join(_PACKAGE_DIR, os.pardir, "native", "include", "hvdlite.h"),  # source tree
)


def _declarations(header_text):
    # cffi's cdef takes plain declarations: drop the C++ guards and every preprocessor line.
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", header_text, flags=re.S)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _load():
    header = next((p for p in _HEADER_CANDIDATES if os.path.exists(p)), None)
    library = os.path.join(_PACKAGE_DIR, "libhvdlite_core.so")
    if header is None or not os.path.exists(library):
        raise ImportError(
            "hvdlite's native core is not built (no libhvdlite_core.so next to the package): "
            "install with `pip install .` (needs mpicxx: `pip install mpich mpi4py`)")
    ffi = cffi.FFI()
    with open(header) as f:
        ffi.cdef(_declarations(f.read()))
    from mpi4py import MPI  # noqa: F401  (loads and initialises the MPI the core links against)
    return ffi, ffi.dlopen(library)


ffi, lib = _load()

ERROR_BUFFER_BYTES = 4096


def error_buffer():
    return ffi.new("char[]", ERROR_BUFFER_BYTES)


def error_text(buffer):
    return ffi.string(buffer).decode("utf-8", "replace")
