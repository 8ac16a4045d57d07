#include "base/trace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace hvdlite {
namespace {

constexpr int64_t kInitialRoom = 64 << 10;

bool WriteAll(int fd, const char *data, size_t size, int64_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, offset);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

}  // namespace

bool TraceFile::Open(const std::string &path) {
  Close();
  path_ = path;
  page_ = std::max<int64_t>(::sysconf(_SC_PAGESIZE), 512);
  end_ = 0;
  empty_ = true;
  batch_.clear();
  // Replace() copies [0, end_) of the old file: there is none yet, so the '[' comes with the tail.
  if (!Replace("[" + std::string(kInitialRoom, ' ') + "]")) return false;
  end_ = 1;
  batch_offset_ = end_;
  return true;
}

bool TraceFile::AppendLines(const std::string &lines) {
  if (fd_ < 0) return false;
  std::string piece;  // one element with its separator; its buffer serves every line
  for (size_t begin = 0; begin < lines.size();) {
    size_t stop = lines.find('\n', begin);
    if (stop == std::string::npos) stop = lines.size();
    piece.assign(empty_ ? "\n" : ",\n");
    piece.append(lines, begin, stop - begin);
    begin = stop + 1;
    if (!Place(piece)) return false;
  }
  return WriteBatch();
}

bool TraceFile::Place(const std::string &piece) {
  const int64_t size = static_cast<int64_t>(piece.size());
  int64_t at = batch_offset_ + static_cast<int64_t>(batch_.size());
  if (at / page_ != (at + size - 1) / page_ && size <= page_) {
    if (!WriteBatch()) return false;
    at = (at / page_ + 1) * page_;  // start on the next page; the spaces skipped stay whitespace
    batch_offset_ = at;
  }
  if (at + size > closing_) {
    if (!WriteBatch()) return false;
    const int64_t closing = std::max(2 * (closing_ + 1), at + size + kInitialRoom);
    if (!Replace(std::string(static_cast<size_t>(closing - end_), ' ') + "]")) return false;
  }
  batch_ += piece;
  empty_ = false;
  return true;
}

bool TraceFile::WriteBatch() {
  if (batch_.empty()) return true;
  if (!WriteAll(fd_, batch_.data(), batch_.size(), batch_offset_)) return false;
  end_ = batch_offset_ + static_cast<int64_t>(batch_.size());
  batch_offset_ = end_;
  batch_.clear();
  return true;
}

bool TraceFile::Replace(const std::string &tail) {
  const std::string copy_path = path_ + ".partial";
  int fd = ::open(copy_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  std::vector<char> buffer(1 << 20);
  int64_t done = 0;
  bool ok = true;
  while (ok && done < end_) {
    ssize_t n = ::pread(fd_, buffer.data(), static_cast<size_t>(std::min<int64_t>(end_ - done, buffer.size())), done);
    ok = n > 0 && WriteAll(fd, buffer.data(), static_cast<size_t>(n), done);
    done += n;
  }
  ok = ok && WriteAll(fd, tail.data(), tail.size(), end_) && ::rename(copy_path.c_str(), path_.c_str()) == 0;
  if (!ok) {
    ::close(fd);
    ::unlink(copy_path.c_str());
    return false;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  closing_ = end_ + static_cast<int64_t>(tail.size()) - 1;
  return true;
}

void TraceFile::Close() {
  if (fd_ < 0) return;
  WriteBatch();
  Replace("\n]\n");
  ::close(fd_);
  fd_ = -1;
}

}  // namespace hvdlite
