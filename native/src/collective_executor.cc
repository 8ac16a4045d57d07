#include "collective_executor.h"

namespace hvdlite {

CollectiveExecutor::CollectiveExecutor(const AlgorithmSettings &settings, const HostLayout &layout,
                                       Timeline &timeline)
    : settings_(settings), layout_(layout), timeline_(timeline), allreduce_(settings, layout, timeline) {}

BatchExecutor *CollectiveExecutor::ExecutorFor(const Request &spec) {
  if (spec.gpu) {
    if (!gpu_) gpu_ = std::make_unique<gpu::NcclExecutor>(layout_.rank, layout_.local_rank,
                                                          settings_.progress_timeout_seconds);
    return gpu_.get();
  }
  switch (spec.collective) {
    case Collective::kAllreduce: return &allreduce_;
    case Collective::kAllgather: return &allgather_;
    case Collective::kBroadcast: return &broadcast_;
    case Collective::kAlltoall: return &alltoall_;
    case Collective::kReducescatter: return &reducescatter_;
    case Collective::kBarrier: return &barrier_;
    default: return nullptr;
  }
}

std::string CollectiveExecutor::Execute(const ProcessSet &set, const FusedBatch &batch,
                                        const std::vector<Entry *> &locals) {
  const Request &spec = batch.parts.front()->spec;
  BatchExecutor *executor = ExecutorFor(spec);
  if (!executor) return "internal error: unexpected collective in a batch";
  const auto start = Clock::now();
  std::string error = executor->Run(set, batch, locals);
  if (const char *phase = executor->TimelinePhase(spec.collective)) RecordPhase(timeline_, locals, phase, start);
  return error;
}

}  // namespace hvdlite
