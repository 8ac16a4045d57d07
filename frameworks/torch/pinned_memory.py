"""Page-locking host memory that torch did not allocate (the memory slot an elastic commit writes into), so that
copies from a GPU into it are direct, asynchronous transfers at the link's rate instead of copies staged through
the CUDA runtime's own buffers, one at a time.

Through the CUDA driver (libcuda.so.1, loaded at run time, as the core loads it): unlike the runtime's
cudaHostRegister, a refusal here leaves no error behind for torch's next kernel launch to report. Memory that
cannot be locked is simply copied into the slower way.
"""
import ctypes
import functools

_PORTABLE = 0x01  # CU_MEMHOSTREGISTER_PORTABLE: locked for every CUDA context, not only the current one


@functools.lru_cache(maxsize=1)
def _driver():
    """(cuMemHostRegister, cuMemHostUnregister), or None where there is no CUDA driver."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        register, unregister = driver.cuMemHostRegister_v2, driver.cuMemHostUnregister
    except (OSError, AttributeError):
        return None
    register.argtypes, register.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint], ctypes.c_int
    unregister.argtypes, unregister.restype = [ctypes.c_void_p], ctypes.c_int
    return register, unregister


class PinnedRange:
    """Host memory [address, address + size) page-locked until ``release()``, if the driver agreed (``pinned``).
    Two ranges must not share a page: release one before locking memory next to it."""

    def __init__(self, address, size):
        driver = _driver()
        self.address = address
        self.pinned = driver is not None and size > 0 and driver[0](address, size, _PORTABLE) == 0

    def release(self):
        if self.pinned:
            _driver()[1](self.address)
            self.pinned = False
