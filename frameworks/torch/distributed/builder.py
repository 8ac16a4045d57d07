"""Compiles the torch.distributed backend into its cache folder (library_cache.py), safely when several processes
want it.

One process builds; the others of the machine wait for it, at most the build timeout, and then load what it built. The
builder holds an flock on the folder's lock file, which the kernel releases when the builder dies however it dies
(Ctrl-C, a scheduler's SIGKILL, a test runner's timeout): a killed build leaves nothing that blocks the next one. It
compiles into a folder of its own and moves the finished library into place with its fingerprint, so a reader sees a
whole library or none. A missing compiler or ninja is an error at once, naming what to install and the build command.
"""
import fcntl
import json
import os
import shutil
import sys
import threading
import time

import torch

from hvdlite import config

from . import library_cache

BUILD_COMMAND = "python -m hvdlite.torch.build"
LOCK = "build.lock"
PRIVATE_PREFIX = "building-"  # a builder's own folder: pid and a start time


def missing_tools():
    """What torch's extension builder needs and this machine lacks (a C++ compiler, ninja), as install hints."""
    from torch.utils import cpp_extension

    missing = []
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        missing.append(f"a C++ compiler ({compiler}: apt-get install g++, or set CXX)")
    if not cpp_extension.is_ninja_available():
        missing.append("ninja (pip install ninja)")
    return missing


def build(folder, expected, timeout=None):
    """The path of the library built for ``expected`` in folder: built here, or by the process that held the lock."""
    timeout = config.SETTINGS_BY_NAME["torch_build_timeout_seconds"].read(os.environ) if timeout is None else timeout
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOCK), "a+") as lock:
        _take(lock, folder, timeout)
        try:
            library = library_cache.built_library(folder, expected)  # built by the process that held the lock
            return library if library else _compile(folder, expected)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _take(lock, folder, timeout):
    """Takes the folder's build lock, waiting at most timeout seconds for the process that holds it."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    print(f"hvdlite: waiting for another process's build of the torch.distributed backend in {folder}",
          file=sys.stderr, flush=True)
    # A blocking flock, bounded: it waits in a helper thread (a lock taken after the time-out is released when this
    # process ends, which the error below makes it do).
    waiter = threading.Thread(target=fcntl.flock, args=(lock, fcntl.LOCK_EX), daemon=True)
    waiter.start()
    waiter.join(timeout if timeout > 0 else None)
    if waiter.is_alive():
        raise RuntimeError(
            f"hvdlite: the torch.distributed backend was still being built by another process in {folder} after "
            f"{timeout:.0f} s; build it ahead with `{BUILD_COMMAND}`, or raise HVDLITE_TORCH_BUILD_TIMEOUT_SECONDS")


def _compile(folder, expected):
    missing = missing_tools()
    if missing:
        raise RuntimeError(
            f"hvdlite's torch.distributed backend is not built for PyTorch {torch.__version__} in {folder}, and it "
            f"cannot be compiled here: this machine lacks {' and '.join(missing)}. Build it once where they are, "
            f"ahead of training: `{BUILD_COMMAND}` (set {library_cache.CACHE_VARIABLE} to a folder every rank reads), "
            "or install them")
    for name in os.listdir(folder):  # what builders killed before they finished left (this process holds the lock)
        if name.startswith(PRIVATE_PREFIX):
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
    private = os.path.join(folder, f"{PRIVATE_PREFIX}{os.getpid()}")
    os.makedirs(private)
    print(f"hvdlite: compiling the torch.distributed backend for PyTorch {torch.__version__} in {folder} (once; "
          f"`{BUILD_COMMAND}` does it ahead of time)", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        built = _run_torch_builder(private)
        seconds = time.monotonic() - started
        os.replace(built, os.path.join(folder, library_cache.LIBRARY))
        stamp = os.path.join(private, library_cache.STAMP)
        with open(stamp, "w") as stream:
            json.dump({"fingerprint": expected, "torch": torch.__version__, "seconds": round(seconds, 1)}, stream)
        os.replace(stamp, os.path.join(folder, library_cache.STAMP))
    finally:
        shutil.rmtree(private, ignore_errors=True)
    print(f"hvdlite: compiled the torch.distributed backend in {seconds:.0f} s", file=sys.stderr, flush=True)
    return os.path.join(folder, library_cache.LIBRARY)


def _run_torch_builder(private):
    """Compiles with torch's extension builder (PyTorch's headers and flags) into private; the library's path."""
    from torch.utils import cpp_extension

    core, header = library_cache.native_core()
    core_dir = os.path.dirname(core)
    try:
        module = cpp_extension.load(
            name=library_cache.MODULE_NAME,
            sources=[os.path.join(library_cache.SOURCE_DIR, source) for source in library_cache.SOURCES],
            extra_include_paths=[library_cache.SOURCE_DIR, os.path.dirname(header)],
            extra_cflags=["-O2"],
            # The core that this process has loaded already (by its soname), found again at run time.
            extra_ldflags=[os.path.join(core_dir, "libhvdlite_core.so"), f"-Wl,-rpath,{core_dir}"],
            build_directory=private,
            verbose=bool(os.environ.get("HVDLITE_TORCH_EXTENSION_VERBOSE")))
    except (OSError, RuntimeError, ImportError) as error:
        raise RuntimeError(
            f"hvdlite could not compile its torch.distributed backend in {private} ({error}); "
            "HVDLITE_TORCH_EXTENSION_VERBOSE=1 shows the build") from error
    return module.__file__
