#include "base/timeline_control.h"

#include "base/logging.h"

namespace hvdlite {

void TimelineControl::Begin(bool coordinator, const std::string &path, bool mark_cycles) {
  coordinator_ = coordinator;
  if (coordinator && !path.empty() && !timeline_.Start(path, mark_cycles)) {
    Log(LogLevel::kError, "cannot open timeline file " + path);
  }
  recording_ = timeline_.active();
  std::lock_guard<std::mutex> lock(mutex_);
  ended_ = false;
}

void TimelineControl::End() {
  timeline_.Stop();
  recording_ = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
  }
  applied_cv_.notify_all();  // a caller waiting for a change gives up
}

int64_t TimelineControl::Post(const std::string &path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mutex_);
  path_ = path;
  mark_cycles_ = mark_cycles;
  pending_.store(true, std::memory_order_release);
  return ++posted_;
}

void TimelineControl::WaitApplied(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  applied_cv_.wait(lock, [&] { return applied_ >= ticket || ended_; });
}

void TimelineControl::Apply() {
  if (!pending()) return;
  std::string path;
  bool marks;
  int64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.store(false, std::memory_order_relaxed);
    path = path_;
    marks = mark_cycles_;
    ticket = posted_;
  }
  if (coordinator_) {
    if (path.empty()) {
      timeline_.Stop();
    } else if (!timeline_.Start(path, marks)) {
      Log(LogLevel::kError, "cannot open timeline file " + path);
    }
  }
  recording_ = timeline_.active();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    applied_ = ticket;
  }
  applied_cv_.notify_all();
}

}  // namespace hvdlite
