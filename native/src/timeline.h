// Chrome trace (chrome://tracing, Perfetto) of every tensor's phases, written by the coordinator.
// The file is valid JSON at every moment: events are appended in front of the closing bracket,
// which is rewritten in the same write, so a job killed mid-run still leaves a readable trace.
#pragma once
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hvdlite {

class Timeline {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  bool Start(const std::string &path, bool mark_cycles);  // false if the file cannot be opened
  void Stop();
  bool active() const { return fd_ >= 0; }
  bool mark_cycles() const { return mark_cycles_; }

  // One finished phase of one tensor (a row per tensor).
  void Record(const std::string &tensor, const char *phase, TimePoint start, TimePoint end);
  void MarkCycle(TimePoint when);
  // Appends what was recorded since the last flush; called once per background cycle.
  void Flush();

 private:
  int64_t Micros(TimePoint t) const;
  int RowOf(const std::string &tensor);

  int fd_ = -1;
  bool mark_cycles_ = false;
  int64_t closing_offset_ = 0;  // where the closing ']' sits
  bool empty_ = true;
  TimePoint origin_;
  std::string pending_;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace hvdlite
