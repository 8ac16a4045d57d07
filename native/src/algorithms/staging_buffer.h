// A grow-only buffer that peers read through cross-memory attach. It is 2 MiB-aligned and advised to be
// backed by transparent huge pages: the kernel pins every page a peer reads, and pinning one 2 MiB page
// costs about what pinning one 4 KiB page does.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hvdlite {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer &) = delete;
  StagingBuffer &operator=(const StagingBuffer &) = delete;
  ~StagingBuffer();
  // At least bytes long; the contents are not kept when it grows.
  uint8_t *Reserve(size_t bytes);

 private:
  uint8_t *data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace hvdlite
