// A grow-only staging buffer in shared memory (a memfd) that the other ranks on this host map and read (and
// write results back into, see direct_allreduce.h) with plain loads and stores: no system call and no page
// pinning per round, unlike cross-memory attach. A peer maps it through /proc/<pid>/fd/<fd>, which needs the
// same right to trace the owner that process_vm_readv needs. Mappings of peers' buffers are kept until the
// peer's buffer grows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvdlite {

class SharedStaging {
 public:
  // What a peer needs to map this rank's buffer; a new generation each time the buffer is replaced, bytes 0
  // while there is none (before the first Reserve, or after one failed).
  struct Descriptor {
    uint64_t pid;
    uint64_t fd;
    uint64_t generation;
    uint64_t bytes;
  };

  SharedStaging() = default;
  SharedStaging(const SharedStaging &) = delete;
  SharedStaging &operator=(const SharedStaging &) = delete;
  ~SharedStaging();

  // This rank's buffer, at least bytes long (contents not kept when it grows); null on failure (error()).
  uint8_t *Reserve(size_t bytes);
  const Descriptor &descriptor() const { return mine_; }
  // Peer's buffer as its descriptor says, mapped read-write; null on failure (error()).
  uint8_t *Map(int peer, const Descriptor &theirs);
  const std::string &error() const { return error_; }

 private:
  struct Mapping {
    Descriptor descriptor{};
    uint8_t *data = nullptr;
  };
  void Unmap(Mapping &mapping);

  Descriptor mine_{};
  int fd_ = -1;
  uint8_t *data_ = nullptr;
  std::vector<Mapping> peers_;  // by rank
  std::string error_;
};

}  // namespace hvdlite
