// A peer that vanishes without closing its connections (a host that lost power or its network) leaves the
// background thread blocked in MPI until TCP gives up, many minutes later, and the launcher never hears of it.
// The background thread marks when it starts a collective and each step that completes (a negotiation round,
// a batch, a segment of the ring, a piece of a broadcast); a watchdog thread wakes once a second (a timed wait on
// a condition variable) and, when a collective has made no progress for the timeout, says so on stderr and ends
// this process, so that the launcher ends the job on every host. A dead process needs none of this: its
// connections close and MPI fails at once.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace hvdlite {

class ProgressWatchdog {
 public:
  static ProgressWatchdog &Get();
  // timeout_seconds 0: off (the marks then cost one relaxed load).
  void Start(double timeout_seconds, int rank);
  void Stop();
  // Background thread: a collective starts (what: a static string naming it), a step of it completed, it ended.
  void Busy(const char *what) {
    if (!enabled_.load(std::memory_order_relaxed)) return;
    what_.store(what, std::memory_order_relaxed);
    last_progress_ns_.store(NowNs(), std::memory_order_relaxed);
  }
  void Progress() {
    if (enabled_.load(std::memory_order_relaxed)) last_progress_ns_.store(NowNs(), std::memory_order_relaxed);
  }
  void Idle() {
    if (enabled_.load(std::memory_order_relaxed)) last_progress_ns_.store(0, std::memory_order_relaxed);
  }

 private:
  static int64_t NowNs();
  void Watch();

  std::atomic<bool> enabled_{false};
  std::atomic<int64_t> last_progress_ns_{0};  // 0: no collective in progress
  std::atomic<const char *> what_{""};
  int64_t timeout_ns_ = 0;
  int rank_ = 0;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// The marks, for the algorithms (a step of a collective completed).
inline void NoteProgress() { ProgressWatchdog::Get().Progress(); }

}  // namespace hvdlite
