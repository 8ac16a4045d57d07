#include "algorithms/shared_staging.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace hvdlite {
namespace {

constexpr size_t kGranule = size_t{2} << 20;  // grows in 2 MiB steps: few regrowths, few remaps by peers

// Unique in the process, so that a peer never takes a new buffer for one it mapped before (fd numbers are
// reused, and a new session of the core starts a new SharedStaging).
std::atomic<uint64_t> last_generation{0};

std::string Failed(const std::string &what) { return what + ": " + std::strerror(errno); }

}  // namespace

SharedStaging::~SharedStaging() {
  for (Mapping &mapping : peers_) Unmap(mapping);
  if (data_) munmap(data_, mine_.bytes);
  if (fd_ >= 0) close(fd_);
}

void SharedStaging::Unmap(Mapping &mapping) {
  if (mapping.data) munmap(mapping.data, mapping.descriptor.bytes);
  mapping = Mapping{};
}

uint8_t *SharedStaging::Reserve(size_t bytes) {
  if (data_ && bytes <= mine_.bytes) return data_;
  if (data_) munmap(data_, mine_.bytes);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  mine_ = Descriptor{};  // none until the new buffer is made
  const size_t size = (bytes + kGranule - 1) / kGranule * kGranule;
  fd_ = memfd_create("hvdlite-staging", MFD_CLOEXEC);
  if (fd_ < 0) {
    error_ = Failed("memfd_create");
    return nullptr;
  }
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    error_ = Failed("ftruncate of the shared staging buffer to " + std::to_string(size) + " bytes");
    return nullptr;
  }
  void *data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (data == MAP_FAILED) {
    error_ = Failed("mmap of the shared staging buffer");
    return nullptr;
  }
  data_ = static_cast<uint8_t *>(data);
  mine_ = Descriptor{static_cast<uint64_t>(getpid()), static_cast<uint64_t>(fd_), ++last_generation, size};
  return data_;
}

uint8_t *SharedStaging::Map(int peer, const Descriptor &theirs) {
  if (peers_.size() <= static_cast<size_t>(peer)) peers_.resize(peer + 1);
  Mapping &mapping = peers_[peer];
  const Descriptor &known = mapping.descriptor;
  if (mapping.data && known.pid == theirs.pid && known.generation == theirs.generation) return mapping.data;
  Unmap(mapping);
  const std::string path = "/proc/" + std::to_string(theirs.pid) + "/fd/" + std::to_string(theirs.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    error_ = Failed("opening rank " + std::to_string(peer) + "'s staging buffer " + path);
    return nullptr;
  }
  void *data = mmap(nullptr, theirs.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  close(fd);  // the mapping keeps the memory
  if (data == MAP_FAILED) {
    errno = mmap_errno;
    error_ = Failed("mapping rank " + std::to_string(peer) + "'s staging buffer " + path);
    return nullptr;
  }
  mapping.descriptor = theirs;
  mapping.data = static_cast<uint8_t *>(data);
  return mapping.data;
}

}  // namespace hvdlite
