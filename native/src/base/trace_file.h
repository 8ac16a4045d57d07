// A JSON array on disk that is valid JSON at every moment, even if the process is killed mid-write.
//
// Linux checks for a fatal signal between the pages of a write, never inside one, so a write that
// stays within one file page lands whole or not at all. The file is therefore kept as
//   [element,element,...<spaces>]
// and every write puts whole elements into the spaces, within one page (an element that would cross
// a page starts on the next one; the spaces it skips are JSON whitespace). When the spaces run out,
// a copy with twice the room is written beside the file and renamed over it (rename is atomic), so
// copying costs O(size) in total. Close() renames a copy without the spaces over the file.
#pragma once
#include <cstdint>
#include <string>

namespace hvdlite {

class TraceFile {
 public:
  ~TraceFile() { Close(); }

  bool Open(const std::string &path);  // false if the file or its copy beside it cannot be written
  bool is_open() const { return fd_ >= 0; }
  // Appends one element per line of `lines` (each line a JSON value, each ending in '\n').
  // Elements longer than a page are written too, but are not protected from a kill mid-write.
  bool AppendLines(const std::string &lines);
  void Close();

 private:
  bool Place(const std::string &piece);
  bool WriteBatch();
  // Writes [0, end_) of the file and then `tail` to the copy beside it, and renames it over the file.
  bool Replace(const std::string &tail);

  std::string path_;
  int fd_ = -1;
  int64_t page_ = 4096;
  int64_t end_ = 0;          // just past the last element on disk
  int64_t closing_ = 0;      // where the closing ']' sits: the file's last byte
  bool empty_ = true;        // no element yet, so the next one needs no comma
  std::string batch_;        // elements bound for one page, not written yet
  int64_t batch_offset_ = 0;  // where batch_ goes
};

}  // namespace hvdlite
