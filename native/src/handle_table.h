// Handles: how a caller on any thread learns that its request finished, and with what.
// The background thread completes them; callers poll or wait on one condition variable.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/core_results.h"
#include "slot_table.h"

namespace hvdlite {

// With its slot's generation, one cache line (see kHandleSlotAlignment): a fused step completes, waits for and
// releases hundreds of handles, each out of cache by then.
struct HandleState {
  bool done = false;
  int64_t result = 0;
  std::string error;
  std::unique_ptr<CoreResults> results;  // allgather, alltoall, GPU collectives; null for the rest
};

class HandleTable {
 public:
  void CreateMany(int64_t *handles, size_t count);  // new pending handles, under one lock
  // Marks done and wakes waiters. The fill function runs under the lock and may move data in.
  template <typename Fill>
  void Complete(int64_t handle, Fill fill) {
    CompleteAll(&handle, 1, [&](size_t, HandleState &s) { fill(s); });
  }
  // Complete for many handles under one lock and one wake-up: a fused batch of hundreds of tensors
  // otherwise wakes its waiter once per tensor, a thread switch each on a shared core.
  // fill(i, state) fills the state of handles[i]. Without wake, the caller calls WakeWaiters when it has
  // finished its own bookkeeping: a waiter woken earlier takes the core from it (2 cores, 4 threads).
  template <typename Fill>
  void CompleteAll(const int64_t *handles, size_t count, Fill fill, bool wake = true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < count; ++i) {
        if (i + kPrefetchAhead < count) slots_.Prefetch(handles[i + kPrefetchAhead]);
        HandleState *state = Find(handles[i]);
        if (!state) continue;  // released before it finished
        fill(i, *state);
        state->done = true;
      }
    }
    if (wake) WakeWaiters();
  }
  void WakeWaiters() { done_.notify_all(); }
  void Fail(int64_t handle, const std::string &error);
  void Succeed(int64_t handle, int64_t result = 0);

  int Poll(int64_t handle);
  // 0 success, 1 error, -1 unknown handle.
  int Wait(int64_t handle) { return WaitAll(&handle, 1); }
  // Several handles under one lock: AllDone is false while one is pending (unknown ones count as done);
  // WaitAll returns -1 for an unknown handle, else 0, or 1 + the index of the first that failed.
  bool AllDone(const int64_t *handles, int32_t count);
  // With a deadline: kPending once it has passed with a handle still pending.
  int WaitAll(const int64_t *handles, int32_t count,
              std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // The index of the first handle that is done (succeeded or failed) or unknown, as soon as there is one; kPending
  // once the deadline has passed with all of them pending. A receive from whichever peer sends first waits so.
  int WaitAny(const int64_t *handles, int32_t count,
              std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  // WaitAll's result where it would not block (under one lock), else kPending.
  static constexpr int kPending = -2;
  int ResultIfDone(const int64_t *handles, int32_t count);
  // Runs f on the state of a finished handle under the lock; returns false for an unknown handle.
  template <typename F>
  bool Read(int64_t handle, F f) {
    std::lock_guard<std::mutex> lock(mutex_);
    HandleState *state = Find(handle);
    if (!state) return false;
    f(*state);
    return true;
  }
  void Release(int64_t handle);
  void ReleaseAll(const int64_t *handles, int32_t count);
  // Releases a handle that succeeded (0); else leaves it and returns ResultIfDone's answer (kPending, 1, -1).
  int ReleaseIfSucceeded(int64_t handle);

 private:
  // Loops over the handles of a fused step load this many slots ahead: each is out of cache by then.
  static constexpr size_t kPrefetchAhead = 8;
  // A handle is (generation << 32) | slot index: finding its state is an array index, not a hash lookup, and
  // a released handle whose slot a newer request took is told apart by the slot's generation.
  // Null for a handle unknown or released. Under the lock, and good only while it is held: slots move as the
  // table grows, so a waiter looks its handle up again whenever it wakes.
  HandleState *Find(int64_t handle) { return slots_.Find(handle); }
  bool ReleaseLocked(int64_t handle);  // true when it had not finished
  int ResultIfDoneLocked(const int64_t *handles, int32_t count);

  std::mutex mutex_;
  std::condition_variable done_;
  // Waits on done_ until finished() (true) or the deadline (false); time_point::max() is no deadline (wait_until
  // with it would overflow the clock's arithmetic).
  template <typename Finished>
  bool WaitUntil(std::unique_lock<std::mutex> &lock, std::chrono::steady_clock::time_point deadline,
                 Finished finished) {
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      done_.wait(lock, finished);
      return true;
    }
    return done_.wait_until(lock, deadline, finished);
  }
  // A handle is a slot's token: creating, completing, waiting for and releasing one is an array access. As many
  // slots as requests were ever in flight at once: nothing grows with the number of steps.
  static constexpr size_t kHandleSlotAlignment = 64;
  SlotTable<HandleState, kHandleSlotAlignment> slots_;
  static_assert(SlotTable<HandleState, kHandleSlotAlignment>::kSlotBytes == kHandleSlotAlignment,
                "a handle's slot should fill one cache line");
};

}  // namespace hvdlite
