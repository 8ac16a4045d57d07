"""Page-locking the host's memory slots, which torch did not allocate, so that a commit's transfer from a GPU into
one goes straight to it at the link's rate, instead of staged through the CUDA runtime's buffers by the CPU.

Through the CUDA driver (libcuda.so.1, loaded at run time, as the core loads it): unlike the runtime's
cudaHostRegister, a refusal here leaves no error behind for torch's next kernel launch to report. Memory that
cannot be locked is copied into the slower way: the copies wait for their end either way, so whether memory is
locked changes their speed, never what they write.
"""
import ctypes
import functools

_PORTABLE = 0x01  # CU_MEMHOSTREGISTER_PORTABLE: locked for every CUDA context, not only the current one
KEPT = 2  # spans kept locked: the two memory slots'


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


_locked = []  # (address, size, the NumPy array over it) locked, oldest first; the array keeps its mapping alive


def lock(span):
    """Page-locks the memory of ``span`` (a NumPy array over a memory slot's arrays: MemorySlot.span) where the
    driver agrees, keeping the KEPT newest spans locked and unlocking older ones. Holding each locked span keeps
    its mapping, so that no lock outlives the memory it locks. The caller makes sure no transfer into an older
    span is under way (commits.memory_arrays waits for the commit before)."""
    address, size = span.ctypes.data, span.nbytes
    if any(a == address and s == size for a, s, _ in _locked):
        return
    driver = _driver()
    if driver is None or size == 0 or driver[0](address, size, _PORTABLE) != 0:
        return
    _locked.append((address, size, span))
    while len(_locked) > KEPT:
        oldest, _, _ = _locked.pop(0)
        driver[1](oldest)
