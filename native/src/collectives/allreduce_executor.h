// All-reduce of a fused batch, by the algorithm chosen for its size and the ranks' layout (algorithms/): reduced
// where its tensors are by the algorithms that can (ring, direct, hierarchical), else copied into the persistent
// fusion buffer (prescale), reduced there and copied out (postscale, average); Adasum always through the buffer.
#pragma once
#include <memory>
#include <vector>

#include "algorithms/adasum_allreduce.h"
#include "algorithms/direct_allreduce.h"
#include "algorithms/hierarchical_allreduce.h"
#include "algorithms/mpi_allreduce.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/tcp_ring_allreduce.h"
#include "collectives/batch_executor.h"
#include "base/timeline.h"

namespace hvdlite {

struct AlgorithmSettings {
  int32_t algorithm = HVDLITE_ALGORITHM_AUTO;
  int64_t ring_segment_bytes = 4 << 20;     // defaults as in hvdlite/config.py (measured there)
  int64_t auto_ring_min_bytes = 256 << 10;
  // Across hosts, MPI_Allreduce below; negative: by layout (CrossHostRingMinBytes).
  int64_t auto_cross_host_ring_min_bytes = -1;
  bool direct_available = false;  // all ranks on one host and able to read each other's memory (probed)
  double progress_timeout_seconds = 0;  // a GPU collective unfinished this long ends the process (gpu_watch.h)
};

// Where the ranks run, as the algorithms need it.
struct HostLayout {
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t hosts = 1;
  bool same_ranks_per_host = true;  // the hierarchical all-reduce needs it
  CommContext local{MPI_COMM_NULL, 0, 1};  // this host's ranks
  CommContext cross{MPI_COMM_NULL, 0, 1};  // one rank per host: those with this rank's local rank
  bool direct_within_host = false;  // this host's ranks (on every host) can read each other's memory
  RingSockets *cross_sockets = nullptr;  // the cross ranks' TCP ring, connected; null: the ring across hosts is MPI's
};

// Measured at 1 Gbit/s (docs/decisions/allreduce-across-hosts.md): with one rank per host the ring across hosts is
// level with MPI_Allreduce from 64 KiB and faster from 256 KiB, waiting in poll() where MPI keeps a core busy; with
// several, the halves within the host make the hierarchical all-reduce slower than MPI below 1 MiB.
constexpr int64_t kOneRankPerHostRingMinBytes = 256 << 10;
constexpr int64_t kHierarchicalMinBytes = 1 << 20;

// The setting where it is one, else the bound of this layout (the same on every rank: every host has one rank, or not).
inline int64_t CrossHostRingMinBytes(int64_t setting, const HostLayout &layout) {
  if (setting >= 0) return setting;
  return layout.same_ranks_per_host && layout.local.size == 1 ? kOneRankPerHostRingMinBytes : kHierarchicalMinBytes;
}

class AllreduceExecutor : public BatchExecutor {
 public:
  AllreduceExecutor(const AlgorithmSettings &settings, const HostLayout &layout, Timeline &timeline);
  std::string Run(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals) override {
    return Reduce(set, batch, locals, nullptr);
  }
  // Run with count more elements of the batch's dtype after its tensors, reduced with them, in place and raw (no
  // prescale, postscale or average): a carried round's bits (carried_round.h). Not for Adasum.
  struct Trailer {
    uint8_t *values;
    int64_t count;
  };
  std::string RunWithTrailer(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals,
                             const Trailer &trailer) {
    return Reduce(set, batch, locals, &trailer);
  }
  const char *TimelinePhase(Collective) const override { return nullptr; }  // each step records its own
  // global_set: the batch belongs to the global process set (the only one the hierarchical all-reduce serves).
  AllreduceAlgorithm &Choose(int64_t bytes, bool global_set);

 private:
  std::string Reduce(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals,
                     const Trailer *trailer);

  AlgorithmSettings settings_;
  HostLayout layout_;
  Timeline &timeline_;
  RingAllreduce ring_;
  MpiAllreduce mpi_;
  DirectAllreduce direct_;
  std::unique_ptr<TcpRingAllreduce> tcp_ring_;  // over layout_.cross_sockets, where connected
  HierarchicalAllreduce hierarchical_;  // uses direct_ and ring_ within each host, tcp_ring_ across hosts
  AdasumAllreduce adasum_;
  std::vector<int64_t> tensor_counts_;  // an Adasum batch's tensor sizes, reused
  std::vector<uint8_t> fusion_buffer_;  // grows to the largest batch, then reused
  std::vector<BufferPiece> pieces_;     // a batch reduced where its tensors are, reused
};

}  // namespace hvdlite
