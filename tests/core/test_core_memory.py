"""Memory is bounded: handles are freed and buffers reused, so nothing grows with the number of steps."""
import os
import shutil
import subprocess
import sys

from harness.processes import assert_ran_ok, run_mpi

STEPS = """
import numpy as np
import hvdlite as hvd
from hvdlite import ops

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4

def step(i):
    handles = [hvd.allreduce_async(np.full(5000, float(j)), name=f"grad.{j}") for j in range(20)]
    for j, h in enumerate(handles):
        assert hvd.synchronize(h)[0] == j
    hvd.allgather(np.ones((hvd.rank() + 1, 3)), name="gather")
    hvd.broadcast(np.ones(100), root_rank=0, name="bcast")
    hvd.allreduce(np.ones(7), name=f"unique.{i}")  # a new name every step: the cache must evict
    # A named group reuses its prepared requests; at 1.25 MB it takes the large-message path (direct on
    # one host: a staging buffer reused step after step).
    outs = hvd.grouped_allreduce([np.full(40000, float(j)) for j in range(4)], name="group")
    assert outs[3][0] == 3 and len(ops._PREPARED_GROUPS) == 1

hvd.init()
for i in range(300):
    step(i)
before = rss_kib()
for i in range(300, 2300):
    step(i)
after = rss_kib()
assert not ops.pending_handles(), ops.pending_handles()
assert after - before < 3 * 1024, f"RSS grew by {after - before} KiB over 2000 steps"
print("WORKER OK", before, after)
"""


def test_memory_does_not_grow_with_steps(tmp_path):
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    # A small cache makes eviction part of every step.
    assert_ran_ok(run_mpi(2, str(script), env={"HVDLITE_CACHE_CAPACITY": "64"}, timeout=400), 2)


# Preloaded into a worker: counts every malloc of the process, and those of the core's background thread that the
# core itself makes (directly, or through libstdc++'s operator new and containers; MPI's own allocations inside a
# collective are not the core's). The worker reads the counts through ctypes.
MALLOC_COUNTER = r"""
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <atomic>
#include <cstddef>
#include <cstring>
static std::atomic<long> calls{0}, core_calls{0};
static thread_local bool inside = false;  // backtrace itself may allocate the first time
// While recording, the stacks of the core's allocations are kept (the first 64), to name them in a failure.
static std::atomic<bool> recording{false};
static std::atomic<int> recorded{0};
static void *stacks[64][12];
static int depths[64];

static bool InLibrary(void *address, const char *name) {
  Dl_info info;
  return dladdr(address, &info) && info.dli_fname && std::strstr(info.dli_fname, name);
}

static bool MadeByCore(void **frames, int count) {
  for (int i = 1; i < count; ++i) {  // frames[0] is this malloc
    if (InLibrary(frames[i], "libstdc++")) continue;
    return InLibrary(frames[i], "libhvdlite_core");
  }
  return false;
}

static void CountCoreCall() {
  void *frames[12];
  const int count = backtrace(frames, 12);
  if (!MadeByCore(frames, count)) return;
  core_calls.fetch_add(1);
  if (!recording.load()) return;
  const int k = recorded.fetch_add(1);
  if (k < 64) {
    std::memcpy(stacks[k], frames, sizeof(frames));
    depths[k] = count;
  }
}

extern "C" void *malloc(size_t size) {
  static void *(*real)(size_t) = reinterpret_cast<void *(*)(size_t)>(dlsym(RTLD_NEXT, "malloc"));
  calls.fetch_add(1, std::memory_order_relaxed);
  if (!inside) {
    inside = true;
    char name[17] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    if (std::strcmp(name, "hvdlite-core") == 0) CountCoreCall();
    inside = false;
  }
  return real(size);
}
extern "C" long hvdlite_test_malloc_calls() { return calls.load(); }
extern "C" long hvdlite_test_core_mallocs() { return core_calls.load(); }
extern "C" void hvdlite_test_record_core_stacks(int on) { recording.store(on != 0); }
extern "C" void hvdlite_test_print_core_stacks() {  // to stderr, as backtrace_symbols_fd writes them
  const int n = recorded.load() < 64 ? recorded.load() : 64;
  for (int k = 0; k < n; ++k) {
    const char header[] = "an allocation on the core's thread:\n";
    (void)!write(2, header, sizeof(header) - 1);
    backtrace_symbols_fd(stacks[k], depths[k], 2);
  }
}
"""


# Put before each worker: a count's growth per step, in steady state (after warm-up steps).
COUNTED_PER_STEP = """
def counted_per_step(count, step, warmup=50, steps=200, record=lambda on: None):
    for _ in range(warmup):
        step()
    record(1)  # the counted steps only
    before = count()
    for _ in range(steps):
        step()
    counted = count() - before
    record(0)
    return counted / steps
"""


def run_with_malloc_counter(tmp_path, worker):
    """Runs worker (a script's text) on 2 ranks with the counter preloaded; its path is the worker's argument."""
    source = tmp_path / "malloc_counter.cc"
    source.write_text(MALLOC_COUNTER)
    library = tmp_path / "malloc_counter.so"
    compiler = shutil.which("mpicxx") or os.path.join(sys.prefix, "bin", "mpicxx")
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", str(source), "-o", str(library), "-ldl"], check=True)
    script = tmp_path / "worker.py"
    script.write_text(COUNTED_PER_STEP + worker)
    assert_ran_ok(run_mpi(2, str(script), str(library), env={"LD_PRELOAD": str(library)}), 2)


REQUESTS = """
import ctypes, sys
import numpy as np
import hvdlite as hvd
from hvdlite.requests import Collective, PreparedGroup, PreparedRequest, Request

counter = ctypes.CDLL(sys.argv[1])
counter.hvdlite_test_malloc_calls.restype = ctypes.c_long
hvd.init()
count = 64
xs = [np.full(256, float(hvd.rank() + i), dtype=np.float32) for i in range(count)]
outs = [np.empty_like(x) for x in xs]
# Names longer than a std::string keeps inline, as a model's parameter names are.
requests = [Request(Collective.ALLREDUCE, f"model.layers.{i}.attention.weight", "float32", x.shape,
                    x.ctypes.data, out.ctypes.data, op=hvd.Sum, keepalive=(x, out))
            for i, (x, out) in enumerate(zip(xs, outs))]
one_by_one = [(PreparedRequest(r), r.input_ptr, r.output_ptr, r.keepalive) for r in requests]
group = PreparedGroup(requests)
expected = [sum(r + i for r in range(hvd.size())) for i in range(count)]

def step():
    handles = [p.submit(x, out, keep) for p, x, out, keep in one_by_one]
    for h in handles:
        h.wait()
        h.release()
    g = group.submit()
    g.wait()
    g.release()
    assert [o[0] for o in outs] == expected

per_request = counted_per_step(counter.hvdlite_test_malloc_calls, step) / (2 * count)
# Each request used to allocate its name and shape on the caller's thread (2 per request); now the core's
# queue and pending entries pass the same buffers round.
assert per_request < 0.5, f"{per_request:.2f} mallocs per request in steady state"
print("WORKER OK", round(per_request, 3))
"""


def test_requests_allocate_nothing_in_steady_state(tmp_path):
    run_with_malloc_counter(tmp_path, REQUESTS)


ROUNDS = """
import ctypes, sys, time
import numpy as np
import hvdlite as hvd

counter = ctypes.CDLL(sys.argv[1])
counter.hvdlite_test_core_mallocs.restype = ctypes.c_long
hvd.init()
rank, size = hvd.rank(), hvd.size()
xs = [np.full(4096, float(rank + i), dtype=np.float32) for i in range(64)]
small = np.full(1024, float(rank), dtype=np.float32)
mixed = [np.full(3000, float(rank + i), dtype=np.float64) for i in range(8)]
expected = [sum(r + i for r in range(size)) for i in range(64)]

steps = 0

def step():
    # One by one (fused into one batch), a group, a small synchronous all-reduce (eager), a group of float64.
    # Warm-up steps run at the ranks' own pace; in the counted ones, now and then one rank pauses partway through
    # its submissions (longer than a cycle), so that rounds ready parts of the step in shapes warm-up never saw.
    global steps
    steps += 1
    pause_at = {0: 16, 2: 40}.get(steps % 5) if steps > 50 and rank == steps % size else None
    handles = []
    for i, x in enumerate(xs):
        if i == pause_at:
            time.sleep(0.003)
        handles.append(hvd.allreduce_async(x, name=f"model.layers.{i}.weight", op=hvd.Sum))
    assert [hvd.synchronize(h)[0] for h in handles] == expected
    assert [o[-1] for o in hvd.grouped_allreduce(xs, name="group", op=hvd.Sum)] == expected
    assert hvd.allreduce(small, name="small", op=hvd.Sum)[0] == sum(range(size))
    assert [o[0] for o in hvd.grouped_allreduce(mixed, name="mixed", op=hvd.Sum)] == expected[:8]

per_step = counted_per_step(counter.hvdlite_test_core_mallocs, step, record=counter.hvdlite_test_record_core_stacks)
# A round's negotiation result and its fusion plan keep their lists from round to round, each reserved at its bound
# (the cache's bits, the set's ranks), so a round whose timing readies more at once than any before allocates
# nothing either.
if per_step:
    counter.hvdlite_test_print_core_stacks()  # where they were made (c++filt reads the names)
assert per_step == 0, f"the core's thread allocated {per_step:.2f} times a step in steady state"
print("WORKER OK", per_step)
"""


def test_background_thread_allocates_nothing_in_steady_state(tmp_path):
    run_with_malloc_counter(tmp_path, ROUNDS)
