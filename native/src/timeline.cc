#include "timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace hvdlite {
namespace {

std::string JsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (static_cast<unsigned char>(c) < 0x20) { char buf[8]; std::snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
    else out += c;
  }
  return out;
}

}  // namespace

bool Timeline::Start(const std::string &path, bool mark_cycles) {
  Stop();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) return false;
  mark_cycles_ = mark_cycles;
  origin_ = std::chrono::steady_clock::now();
  rows_.clear();
  pending_.clear();
  empty_ = true;
  const char initial[] = "[\n]";
  if (::pwrite(fd_, initial, sizeof initial - 1, 0) < 0) { Stop(); return false; }
  closing_offset_ = sizeof initial - 2;
  return true;
}

void Timeline::Stop() {
  if (fd_ < 0) return;
  Flush();
  ::close(fd_);
  fd_ = -1;
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
              ",\"args\":{\"name\":\"" + JsonEscape(tensor) + "\"}},\n";
  return row;
}

void Timeline::Record(const std::string &tensor, const char *phase, TimePoint start, TimePoint end) {
  if (fd_ < 0) return;
  int row = RowOf(tensor);
  pending_ += "{\"name\":\"" + std::string(phase) + "\",\"ph\":\"X\",\"pid\":0,\"tid\":" + std::to_string(row) +
              ",\"ts\":" + std::to_string(Micros(start)) + ",\"dur\":" + std::to_string(Micros(end) - Micros(start)) +
              "},\n";
}

void Timeline::MarkCycle(TimePoint when) {
  if (fd_ < 0 || !mark_cycles_) return;
  pending_ += "{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" +
              std::to_string(Micros(when)) + "},\n";
}

void Timeline::Flush() {
  if (fd_ < 0 || pending_.empty()) return;
  // pending_ ends with ",\n"; drop it, join to what is there, and close the array again.
  pending_.resize(pending_.size() - 2);
  std::string chunk = (empty_ ? "" : ",\n") + pending_ + "\n]";
  if (::pwrite(fd_, chunk.data(), chunk.size(), closing_offset_) == static_cast<ssize_t>(chunk.size())) {
    closing_offset_ += static_cast<int64_t>(chunk.size()) - 1;
    empty_ = false;
  }
  pending_.clear();
}

}  // namespace hvdlite
