// Cross-memory attach: copying straight out of another process's memory with Linux's process_vm_readv,
// the single copy MPICH's shared-memory transport also makes for large messages. It needs the peer on
// this host and the right to trace it (same user; Yama's ptrace_scope 0 where Yama is on).
#pragma once
#include <mpi.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hvdlite {

// Gathers (local, remote, bytes) runs to copy from one peer (process_vm_readv) or to it (process_vm_writev) and
// copies them in as few system calls as the kernel's iovec limit allows.
class PeerCopier {
 public:
  enum class Direction { kRead, kWrite };
  void Begin(pid_t peer, Direction direction = Direction::kRead);
  // May copy what was gathered so far (when the iovec lists are full).
  void Add(void *local, uint64_t remote, int64_t bytes);
  // Copies the rest; false when any copy failed or came up short (error() says why).
  bool Finish();
  const std::string &error() const { return error_; }
  int error_number() const { return error_number_; }  // errno of the failed call, 0 for a short copy

 private:
  void Flush();

  pid_t peer_ = 0;
  Direction direction_ = Direction::kRead;
  std::vector<iovec> local_, remote_;  // reused: no allocation once warm
  int64_t gathered_bytes_ = 0;
  std::string error_;
  int error_number_ = 0;
};

// Collective over comm, whose ranks all share this host. True on every rank when each could read every
// other's memory, with process_vm_readv and through a shared staging buffer (shared_staging.h); false on
// every rank otherwise, with the reason in *why (the same on all ranks).
bool CrossMemoryWorks(MPI_Comm comm, std::string *why);

}  // namespace hvdlite
