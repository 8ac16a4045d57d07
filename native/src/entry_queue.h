// Requests on their way from caller threads to the background thread. Each slot keeps the buffers of the
// entries it held (name, shape), so that copying a request in costs no heap allocation once the queue has
// held as many at once: a name allocated on a caller thread and freed on the background thread is what
// glibc's allocator handles worst.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "process_set.h"

namespace hvdlite {

class EntryQueue {
 public:
  // Copies e into the next slot (reusing that slot's buffers); returns the queued entry.
  Entry &Push(const Entry &e) {
    if (used_ == slots_.size()) slots_.emplace_back();
    Entry &slot = slots_[used_++];
    slot = e;
    return slot;
  }
  // Forgets the entries; their slots keep their buffers for the next ones, up to a bound, so that one burst of
  // requests does not pin its memory for the life of the job.
  void Clear() {
    used_ = 0;
    if (slots_.size() > kMaxKept) {
      slots_.resize(kMaxKept);
      slots_.shrink_to_fit();
    }
  }
  void swap(EntryQueue &other) {
    slots_.swap(other.slots_);
    std::swap(used_, other.used_);
  }

  bool empty() const { return used_ == 0; }
  size_t size() const { return used_; }
  Entry *begin() { return slots_.data(); }
  Entry *end() { return slots_.data() + used_; }

 private:
  static constexpr size_t kMaxKept = 4096;  // as NodePool's spare nodes

  std::vector<Entry> slots_;
  size_t used_ = 0;
};

}  // namespace hvdlite
