// Chrome trace (chrome://tracing, Perfetto) of every tensor's phases, written by the coordinator.
// Events go to a TraceFile, valid JSON at every moment, so a job killed mid-run still leaves a
// readable trace.
#pragma once
#include <chrono>
#include <string>
#include <unordered_map>

#include "base/trace_file.h"

namespace hvdlite {

class Timeline {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  bool Start(const std::string &path, bool mark_cycles);  // false if the file cannot be opened
  void Stop();
  bool active() const { return file_.is_open(); }
  bool mark_cycles() const { return mark_cycles_; }

  // One finished phase of one tensor (a row per tensor).
  void Record(const std::string &tensor, const char *phase, TimePoint start, TimePoint end);
  void MarkCycle(TimePoint when);
  // Appends what was recorded since the last flush; called once per background cycle.
  void Flush();

 private:
  int64_t Micros(TimePoint t) const;
  int RowOf(const std::string &tensor);

  TraceFile file_;
  bool mark_cycles_ = false;
  TimePoint origin_;
  std::string pending_;  // events since the last flush, one per line
  std::unordered_map<std::string, int> rows_;
};

}  // namespace hvdlite
