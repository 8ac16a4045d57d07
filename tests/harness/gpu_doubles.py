"""TEST DOUBLES of the CUDA driver and of NCCL (tests/gpu/doubles) for the GPU path's tests on machines without a GPU:
host memory stands for device memory, streams are deferred, collectives go over MPI. Built once by the outer pytest
(build()); a rank's job loads them through ENV, and reaches their test hooks through doubles()."""
import ctypes
import os
import subprocess

from harness.processes import ROOT, venv_tool

SOURCES = os.path.join(ROOT, "tests", "gpu", "doubles")
DOUBLES = os.path.join(ROOT, "build", "gpu_doubles")
CUDA_DOUBLE = os.path.join(DOUBLES, "libcuda.so.1")
NCCL_DOUBLE = os.path.join(DOUBLES, "libnccl.so.2")
ENV = {"LD_LIBRARY_PATH": os.path.abspath(DOUBLES), "HVDLITE_NCCL_LIBRARY": os.path.abspath(NCCL_DOUBLE)}


def build():
    """Compiles the doubles (once, in the outer pytest: the ranks' jobs find them built)."""
    sources = [os.path.join(SOURCES, name) for name in ("fake_cuda.c", "fake_nccl.c")]
    newest = max(os.path.getmtime(s) for s in sources)
    if all(os.path.exists(p) and os.path.getmtime(p) >= newest for p in (CUDA_DOUBLE, NCCL_DOUBLE)):
        return
    os.makedirs(DOUBLES, exist_ok=True)
    # The compilers run without a sanitizer's runtime that the outer pytest may have preloaded (gcc crashed under
    # ThreadSanitizer's).
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["cc", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-Wl,-soname,libcuda.so.1", "-o",
                    CUDA_DOUBLE, sources[0], "-lpthread"], check=True, env=env)
    subprocess.run([venv_tool("mpicc"), "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    "-Wl,-soname,libnccl.so.2", "-o", NCCL_DOUBLE, sources[1], "-L", DOUBLES, "-l:libcuda.so.1",
                    "-lm"], check=True, env=env)


class Doubles:
    """The CUDA double's test hooks (the core opened the same library: one copy in the process)."""

    def __init__(self):
        self.cuda = ctypes.CDLL(CUDA_DOUBLE)
        self.nccl = ctypes.CDLL(NCCL_DOUBLE)
        self.cuda.fake_cuda_fill_f64.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_size_t]
        self.cuda.fake_cuda_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        self.cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.nccl.fake_nccl_allreduce_calls.restype = ctypes.c_long
        self.nccl.fake_nccl_calls.restype = ctypes.c_long

    def stream(self):
        handle = ctypes.c_void_p()
        assert self.cuda.cuStreamCreate(ctypes.byref(handle), 0) == 0
        return handle.value


_DOUBLES = []


def doubles():
    """The doubles' test hooks in this process (loaded once)."""
    if not _DOUBLES:
        _DOUBLES.append(Doubles())
    return _DOUBLES[0]
