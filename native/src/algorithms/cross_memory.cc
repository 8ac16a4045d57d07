#include "cross_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

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

void PeerReader::Begin(pid_t peer) {
  peer_ = peer;
  local_.clear();
  remote_.clear();
  gathered_bytes_ = 0;
  error_.clear();
  error_number_ = 0;
}

void PeerReader::Add(void *local, uint64_t remote, int64_t bytes) {
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

void PeerReader::Flush() {
  if (local_.empty()) return;
  if (error_.empty()) {
    const ssize_t got = process_vm_readv(peer_, local_.data(), local_.size(), remote_.data(), remote_.size(), 0);
    if (got < 0) {
      error_number_ = errno;
      error_ = "process_vm_readv from pid " + std::to_string(peer_) + ": " + std::strerror(error_number_);
    } else if (got != gathered_bytes_) {
      error_ = "process_vm_readv from pid " + std::to_string(peer_) + " read " + std::to_string(got) + " of " +
               std::to_string(gathered_bytes_) + " bytes";
    }
  }
  local_.clear();
  remote_.clear();
  gathered_bytes_ = 0;
}

bool PeerReader::Finish() {
  Flush();
  return error_.empty();
}

bool CrossMemoryWorks(MPI_Comm comm, std::string *why) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Each rank reads a value every other rank published (pid, address, value) and checks it.
  const uint64_t mine = (static_cast<uint64_t>(getpid()) << 20) ^ 0x5eedULL ^ static_cast<uint64_t>(rank);
  const uint64_t published[3] = {static_cast<uint64_t>(getpid()), reinterpret_cast<uint64_t>(&mine), mine};
  std::vector<uint64_t> all(3 * static_cast<size_t>(size));
  MPI_Allgather(published, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm);
  int failure = 0;  // an errno, or -1 for a wrong value
  PeerReader reader;
  for (int peer = 0; peer < size && failure == 0; ++peer) {
    if (peer == rank) continue;
    uint64_t seen = 0;
    reader.Begin(static_cast<pid_t>(all[3 * peer]));
    reader.Add(&seen, all[3 * peer + 1], sizeof seen);
    if (!reader.Finish()) failure = reader.error_number() != 0 ? reader.error_number() : -1;
    else if (seen != all[3 * peer + 2]) failure = -1;
  }
  std::vector<int> failures(size);  // also keeps `mine` alive until every rank has read it
  MPI_Allgather(&failure, 1, MPI_INT, failures.data(), 1, MPI_INT, comm);
  for (int r = 0; r < size; ++r) {
    if (failures[r] == 0) continue;
    *why = "rank " + std::to_string(r) + " cannot read its peers' memory (process_vm_readv: " +
           (failures[r] > 0 ? std::strerror(failures[r]) : "wrong data") + ")";
    return false;
  }
  return true;
}

}  // namespace hvdlite
