#!/usr/bin/env bash
# Runs multi-rank tests against a sanitizer build of the core and the extension:
#   address: AddressSanitizer + UndefinedBehaviorSanitizer, the tests marked sanitize(address=True);
#   thread:  ThreadSanitizer, the tests marked sanitize(thread=True) (background thread, handle table, queue).
# The build goes to build/sanitize-KIND (CMake's sanitize-KIND preset), so the ordinary build is left alone, and the
# tests load it through HVDLITE_NATIVE_DIR. Usage: run.sh address|thread [pytest arguments]
set -euo pipefail
kind=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}

case $kind in address|thread) ;; *) echo "usage: $0 address|thread [pytest arguments]" >&2; exit 2 ;; esac
cd "$root"
cmake --preset "sanitize-$kind" -DPython_EXECUTABLE="$python" >/dev/null
cmake --build --preset "sanitize-$kind"
export HVDLITE_NATIVE_DIR=$root/build/sanitize-$kind/hvdlite

case $kind in
  address)
    # libstdc++ loaded up front too: ASan intercepts __cxa_throw only when libstdc++ is there as it starts, and a
    # C++ extension that throws during its import (matplotlib's, which TensorFlow imports where it is installed)
    # otherwise stops the process in an ASan CHECK.
    export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)"
    export PYTHONMALLOC=malloc  # every Python object through malloc, where ASan sees it
    # Leaks are checked where LeakSanitizer is reliable, in the native unit tests (make native-unit-tests-asan):
    # at the exit of these MPI processes its stop-the-world tracer crashed now and then (signal 11 in the
    # tracer, a few jobs in a run), and at exit CPython and MPICH keep memory by design.
    export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    ;;
  thread)
    export LD_PRELOAD=$(gcc -print-file-name=libtsan.so)
    export TSAN_OPTIONS=suppressions=$here/tsan.supp:halt_on_error=1:second_deadlock_stack=1
    # UCX (MPICH's network layer) patches madvise, which glibc calls as a thread exits, and takes a lock there
    # that ThreadSanitizer no longer tracks for that thread: a crash at every thread's exit. Without the hook
    # UCX only loses its memory-registration cache.
    export UCX_MEM_MMAP_HOOK_MODE=none
    ;;
esac
# The tests marked sanitize(KIND=True) (tests/harness/marks.py), multi-rank ones only (-m ranks): the whole-program
# tests of those files start system tools (pgrep, ps) that must not run with a sanitizer's runtime preloaded.
# Each sanitizer runs every test at its own count only: AddressSanitizer's reruns at 2 ranks (shares and offsets
# differ with the count) no longer fit CI's budget, and the races ThreadSanitizer looks for are between a process's
# threads, the same at any rank count, while each rank more on 2 cores slows every rank's instrumented threads
# (ThreadSanitizer runs in make check-long).
case $kind in
  address) selection="ranks and sanitize(address=True) and not many_ranks and not extra_ranks" ;;
  thread) selection="ranks and sanitize(thread=True) and fewest_ranks" ;;
esac
exec "$python" -m pytest tests -q --durations=15 -p no:cacheprovider -m "$selection" "$@"
