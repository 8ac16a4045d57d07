#include "staging_buffer.h"

#include <sys/mman.h>

#include <new>

namespace hvdlite {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

StagingBuffer::~StagingBuffer() {
  if (data_) munmap(data_, capacity_);
}

uint8_t *StagingBuffer::Reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  if (data_) munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Map one huge page more than needed and trim both ends so that what is left starts on a 2 MiB boundary.
  void *raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePage;
  if (end > aligned + size) munmap(reinterpret_cast<void *>(aligned + size), end - (aligned + size));
  data_ = reinterpret_cast<uint8_t *>(aligned);
  capacity_ = size;
  madvise(data_, capacity_, MADV_HUGEPAGE);  // advice only: without THP it is plain memory
  return data_;
}

}  // namespace hvdlite
