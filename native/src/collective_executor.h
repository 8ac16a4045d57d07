// Runs the batches a round agreed on: picks the executor of each batch's kind (collectives/: all-reduce,
// allgather, broadcast, alltoall, reducescatter, barrier; gpu/nccl_executor.h for GPU tensors, made by the first
// GPU collective) and records its time in the timeline. Every rank calls it with the same batches in the same order.
#pragma once
#include <memory>
#include <vector>

#include "collectives/allgather_executor.h"
#include "collectives/allreduce_executor.h"
#include "collectives/alltoall_executor.h"
#include "collectives/barrier_executor.h"
#include "collectives/broadcast_executor.h"
#include "collectives/reducescatter_executor.h"
#include "collectives/nccl_executor.h"
#include "base/timeline.h"

namespace hvdlite {

class CollectiveExecutor {
 public:
  CollectiveExecutor(const AlgorithmSettings &settings, const HostLayout &layout, Timeline &timeline);
  // locals[i] is this rank's entry for batch.parts[i], or nullptr where this rank joined.
  // Returns an error message, or an empty string on success.
  std::string Execute(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals);
  // A CPU all-reduce batch with count more elements reduced with it (AllreduceExecutor::RunWithTrailer).
  std::string ExecuteWithTrailer(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals,
                                 const AllreduceExecutor::Trailer &trailer) {
    return allreduce_.RunWithTrailer(set, batch, locals, trailer);
  }
  // A removed process set's NCCL communicator goes with it.
  void ForgetProcessSet(int32_t set_id) {
    if (gpu_) gpu_->ForgetProcessSet(set_id);
  }

 private:
  // The executor of a batch's kind; nullptr for a collective no batch carries.
  BatchExecutor *ExecutorFor(const Request &spec);

  AlgorithmSettings settings_;
  HostLayout layout_;
  Timeline &timeline_;
  AllreduceExecutor allreduce_;
  AllgatherExecutor allgather_;
  BroadcastExecutor broadcast_;
  AlltoallExecutor alltoall_;
  ReducescatterExecutor reducescatter_;
  BarrierExecutor barrier_;
  std::unique_ptr<gpu::NcclExecutor> gpu_;  // made by the first GPU collective
};

}  // namespace hvdlite
