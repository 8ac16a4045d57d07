#include "algorithms/cross_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "algorithms/shared_staging.h"

namespace hvdlite {
namespace {

constexpr size_t kMaxRuns = IOV_MAX;                // per side, per system call
constexpr int64_t kMaxCallBytes = int64_t{1} << 30;  // well under the kernel's cap on one transfer

// Adjacent runs become one iovec: the kernel pins the remote side one iovec at a time.
void Append(std::vector<iovec> &list, void *base, int64_t bytes) {
  if (!list.empty() && static_cast<uint8_t *>(list.back().iov_base) + list.back().iov_len == base) {
    list.back().iov_len += static_cast<size_t>(bytes);
  } else {
    list.push_back(iovec{base, static_cast<size_t>(bytes)});
  }
}

}  // namespace

void PeerCopier::Begin(pid_t peer, Direction direction) {
  peer_ = peer;
  direction_ = direction;
  local_.clear();
  remote_.clear();
  gathered_bytes_ = 0;
  error_.clear();
  error_number_ = 0;
}

void PeerCopier::Add(void *local, uint64_t remote, int64_t bytes) {
  while (bytes > 0) {
    if (local_.size() == kMaxRuns || remote_.size() == kMaxRuns || gathered_bytes_ == kMaxCallBytes) Flush();
    const int64_t take = std::min(bytes, kMaxCallBytes - gathered_bytes_);
    Append(local_, local, take);
    Append(remote_, reinterpret_cast<void *>(remote), take);
    gathered_bytes_ += take;
    local = static_cast<uint8_t *>(local) + take;
    remote += static_cast<uint64_t>(take);
    bytes -= take;
  }
}

void PeerCopier::Flush() {
  if (local_.empty()) return;
  if (error_.empty()) {
    const bool read = direction_ == Direction::kRead;
    const ssize_t done = read ? process_vm_readv(peer_, local_.data(), local_.size(), remote_.data(), remote_.size(), 0)
                              : process_vm_writev(peer_, local_.data(), local_.size(), remote_.data(), remote_.size(), 0);
    auto call = [&] {
      return std::string(read ? "process_vm_readv from" : "process_vm_writev to") + " pid " + std::to_string(peer_);
    };
    if (done < 0) {
      error_number_ = errno;
      error_ = call() + ": " + std::strerror(error_number_);
    } else if (done != gathered_bytes_) {
      error_ = call() + " copied " + std::to_string(done) + " of " + std::to_string(gathered_bytes_) + " bytes";
    }
  }
  local_.clear();
  remote_.clear();
  gathered_bytes_ = 0;
}

bool PeerCopier::Finish() {
  Flush();
  return error_.empty();
}

bool CrossMemoryWorks(MPI_Comm comm, std::string *why) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Each rank reads a value every other rank published (pid, address, value), then the same value out of
  // every other rank's shared staging buffer (the way fused batches are read), and checks both.
  struct Record {
    uint64_t pid, address, value;       // read with process_vm_readv
    SharedStaging::Descriptor staging;  // holding value too; bytes 0 when it could not be made
  };
  const uint64_t mine = (static_cast<uint64_t>(getpid()) << 20) ^ 0x5eedULL ^ static_cast<uint64_t>(rank);
  SharedStaging staging;
  uint8_t *shared = staging.Reserve(sizeof mine);
  if (shared) std::memcpy(shared, &mine, sizeof mine);
  const Record published{static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(&mine), mine,
                         staging.descriptor()};
  std::vector<Record> all(static_cast<size_t>(size));
  MPI_Allgather(&published, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE, comm);
  std::string failure;  // this rank's, empty when it read everything right
  if (!shared) failure = staging.error();
  PeerCopier reader;
  for (int peer = 0; peer < size && failure.empty(); ++peer) {
    if (peer == rank) continue;
    const Record &theirs = all[static_cast<size_t>(peer)];
    uint64_t seen = 0;
    reader.Begin(static_cast<pid_t>(theirs.pid));
    reader.Add(&seen, theirs.address, sizeof seen);
    if (!reader.Finish()) {
      failure = reader.error();
      break;
    }
    if (seen != theirs.value) failure = "process_vm_readv from rank " + std::to_string(peer) + " read wrong data";
    if (!failure.empty() || theirs.staging.bytes == 0) continue;  // a rank without a buffer reports it itself
    const uint8_t *mapped = staging.Map(peer, theirs.staging);
    if (!mapped) failure = staging.error();
    else if (std::memcmp(mapped, &theirs.value, sizeof seen) != 0) {
      failure = "rank " + std::to_string(peer) + "'s shared staging buffer held wrong data";
    }
  }
  // Which ranks failed; also keeps `mine` and the buffers alive until every rank has read them.
  int failed = failure.empty() ? 0 : 1;
  std::vector<int> failures(size);
  MPI_Allgather(&failed, 1, MPI_INT, failures.data(), 1, MPI_INT, comm);
  for (int r = 0; r < size; ++r) {
    if (failures[r] == 0) continue;
    // The first failing rank's reason, the same text on every rank.
    int length = r == rank ? static_cast<int>(failure.size()) : 0;
    MPI_Bcast(&length, 1, MPI_INT, r, comm);
    std::string reason(static_cast<size_t>(length), ' ');
    if (r == rank) reason = failure;
    MPI_Bcast(reason.data(), length, MPI_CHAR, r, comm);
    *why = "rank " + std::to_string(r) + " cannot read its peers' memory (" + reason + ")";
    return false;
  }
  return true;
}

}  // namespace hvdlite
