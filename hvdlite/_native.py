"""Loads the native core (libhvdlite_core.so) through cffi's ABI mode.

The declarations come from the one C header, so Python and C cannot drift apart. MPI must be loaded
before the library (mpi4py does it), so that the core binds to the same libmpi as mpi4py.
"""
import importlib

from . import build_info, native_header
from .mpi_start import import_mpi
from .runner.protocol import STARTED, STARTING, report_mpi_start


def _load():
    library = build_info.native_file("libhvdlite_core.so")
    if native_header.path() is None or library is None:
        raise ImportError(
            f"hvdlite's native core is not built (no libhvdlite_core.so in {', '.join(build_info.native_dirs())}): "
            "install with `pip install .` (see the README)")
    ffi, _ = native_header.parsed()
    build_info.check_same_mpi(MPI.Get_library_version())
    # The extension before the core: importing it is what makes an editable install rebuild what changed, and it
    # loads the core (its dependency, by soname) that the dlopen below then shares.
    importlib.import_module("hvdlite._tensor_calls")
    return ffi, ffi.dlopen(library)


def _start_mpi():
    """Imports mpi4py's MPI, which loads the MPI library the core links against and starts MPI (mpi4py's own
    contract: a program may use mpi4py between importing hvdlite and hvd.init()), except in a process that torch's
    launchers started, whose MPI starts when the ranks meet (mpi_start.py). A rank that hvdliterun started tells
    it before and after (runner/start_watch.py: a job whose MPI never gets going is ended)."""
    report_mpi_start(STARTING)
    MPI = import_mpi()
    report_mpi_start(STARTED)
    return MPI


MPI = _start_mpi()
ffi, lib = _load()

ERROR_BUFFER_BYTES = 4096


def error_buffer():
    return ffi.new("char[]", ERROR_BUFFER_BYTES)


def error_text(buffer):
    return ffi.string(buffer).decode("utf-8", "replace")
