#include "base/timeline.h"

#include <cstdio>

#include "base/logging.h"

namespace hvdlite {
namespace {

// Long names are cut (on a UTF-8 character boundary) so that every event fits in one file page,
// the unit TraceFile writes whole.
constexpr size_t kMaxShownNameBytes = 512;

std::string JsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (static_cast<unsigned char>(c) < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += c;
  }
  return out;
}

std::string ShownName(const std::string &name) {
  if (name.size() <= kMaxShownNameBytes) return name;
  size_t cut = kMaxShownNameBytes;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return name.substr(0, cut) + "...";
}

}  // namespace

bool Timeline::Start(const std::string &path, bool mark_cycles) {
  Stop();
  if (!file_.Open(path)) return false;
  mark_cycles_ = mark_cycles;
  origin_ = std::chrono::steady_clock::now();
  rows_.clear();
  pending_.clear();
  return true;
}

void Timeline::Stop() {
  if (!file_.is_open()) return;
  Flush();
  file_.Close();
}

int64_t Timeline::Micros(TimePoint t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
}

int Timeline::RowOf(const std::string &tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  pending_ += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(row) +
              ",\"args\":{\"name\":\"" + JsonEscape(ShownName(tensor)) + "\"}}\n";
  return row;
}

void Timeline::Record(const std::string &tensor, const char *phase, TimePoint start, TimePoint end) {
  if (!file_.is_open()) return;
  int row = RowOf(tensor);
  pending_ += "{\"name\":\"" + std::string(phase) + "\",\"ph\":\"X\",\"pid\":0,\"tid\":" + std::to_string(row) +
              ",\"ts\":" + std::to_string(Micros(start)) + ",\"dur\":" + std::to_string(Micros(end) - Micros(start)) +
              "}\n";
}

void Timeline::MarkCycle(TimePoint when) {
  if (!file_.is_open() || !mark_cycles_) return;
  pending_ += "{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" +
              std::to_string(Micros(when)) + "}\n";
}

void Timeline::Flush() {
  if (pending_.empty()) return;
  if (!file_.AppendLines(pending_)) {
    Log(LogLevel::kError, "cannot write the timeline file (disk full?): timeline stopped");
    file_.Close();
  }
  pending_.clear();
}

}  // namespace hvdlite
