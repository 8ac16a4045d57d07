// The timeline as the job runs: started from the settings at set-up, and started or stopped at run time
// (hvd.start_timeline / stop_timeline) by a caller thread, which waits until the background thread has applied
// the change, so that every request submitted after start_timeline() returns is recorded and none after
// stop_timeline() returns. Only the coordinator (rank 0) writes the file.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "base/timeline.h"

namespace hvdlite {

class TimelineControl {
 public:
  // Background thread: at set-up (the settings' file, if any) and at tear-down (closes it, frees waiters).
  void Begin(bool coordinator, const std::string &path, bool mark_cycles);
  void End();
  // Background thread, before each round: applies the latest change asked for, if any.
  void Apply();
  Timeline &timeline() { return timeline_; }

  // Caller threads: Post asks for a change (an empty path stops the timeline) and returns its ticket; the
  // caller then wakes the background thread and waits for the ticket (or for the core to stop).
  int64_t Post(const std::string &path, bool mark_cycles);
  void WaitApplied(int64_t ticket);
  // Any thread: a change waits to be applied; the timeline is recording (submissions stamp precise times).
  bool pending() const { return pending_.load(std::memory_order_acquire); }
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

 private:
  Timeline timeline_;
  bool coordinator_ = false;
  std::atomic<bool> pending_{false};
  std::atomic<bool> recording_{false};
  std::mutex mutex_;  // guards what follows
  std::condition_variable applied_cv_;
  std::string path_;
  bool mark_cycles_ = false;
  int64_t posted_ = 0, applied_ = 0;
  bool ended_ = true;
};

}  // namespace hvdlite
