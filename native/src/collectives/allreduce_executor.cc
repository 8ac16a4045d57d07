#include "collectives/allreduce_executor.h"

#include <algorithm>
#include <cstring>

#include "base/reduce_kernels.h"

namespace hvdlite {

AllreduceExecutor::AllreduceExecutor(const AlgorithmSettings &settings, const HostLayout &layout, Timeline &timeline)
    : settings_(settings),
      layout_(layout),
      timeline_(timeline),
      ring_(settings.ring_segment_bytes),
      hierarchical_(direct_, ring_, settings.ring_segment_bytes) {
  settings_.auto_cross_host_ring_min_bytes = CrossHostRingMinBytes(settings.auto_cross_host_ring_min_bytes, layout);
  if (layout.cross_sockets) tcp_ring_ = std::make_unique<TcpRingAllreduce>(*layout.cross_sockets, settings.ring_segment_bytes);
  hierarchical_.SetTopology(layout.local, layout.cross, layout.direct_within_host,
                            settings_.auto_cross_host_ring_min_bytes, tcp_ring_.get());
}

AllreduceAlgorithm &AllreduceExecutor::Choose(int64_t bytes, bool global_set) {
  const bool hierarchical = global_set && layout_.same_ranks_per_host;
  switch (settings_.algorithm) {
    case HVDLITE_ALGORITHM_RING: return ring_;
    case HVDLITE_ALGORITHM_MPI: return mpi_;
    case HVDLITE_ALGORITHM_DIRECT: return direct_;  // init checked that it is available
    case HVDLITE_ALGORITHM_HIERARCHICAL: return hierarchical ? static_cast<AllreduceAlgorithm &>(hierarchical_) : ring_;
    default:
      if (layout_.hosts > 1) {
        if (bytes < settings_.auto_cross_host_ring_min_bytes) return mpi_;
        return hierarchical ? static_cast<AllreduceAlgorithm &>(hierarchical_) : ring_;
      }
      if (bytes < settings_.auto_ring_min_bytes) return mpi_;
      return settings_.direct_available ? static_cast<AllreduceAlgorithm &>(direct_) : ring_;
  }
}

std::string AllreduceExecutor::Reduce(const ProcessSet &set, const FusedBatch &batch, const std::vector<Entry *> &locals,
                                      const Trailer *trailer) {
  const CommContext ctx = ContextOf(set);
  const bool global_set = set.id == 0;
  const Request &spec = batch.parts.front()->spec;
  const size_t element = DataTypeSize(spec.dtype);
  const int64_t trailer_bytes = trailer ? trailer->count * static_cast<int64_t>(element) : 0;
  const int64_t total = (batch.total_bytes + trailer_bytes) / static_cast<int64_t>(element);
  AllreduceAlgorithm &algorithm = Choose(batch.total_bytes, global_set);
  const bool adasum = spec.op == ReduceOp::kAdasum;  // combines tensor by tensor: always through the buffer

  auto failed = [&](const std::string &error) {
    return "all-reduce of '" + spec.name + "'" +
           (batch.parts.size() > 1 ? " (fused with " + std::to_string(batch.parts.size() - 1) + " more)" : "") +
           ": " + error;
  };

  // One tensor that this rank holds: reduce in its output directly, no fusion-buffer copies.
  if (batch.parts.size() == 1 && locals[0] && !adasum && !trailer) {
    Entry &e = *locals[0];
    auto start = Clock::now();
    std::string error;
    if (spec.prescale == 1.0) {
      error = algorithm.RunFrom(ctx, e.input, e.output, total, spec.dtype, spec.op);
    } else {
      ScaleCopy(e.output, e.input, total, spec.dtype, spec.prescale);
      start = Clock::now();
      error = algorithm.Run(ctx, e.output, total, spec.dtype, spec.op);
    }
    RecordPhase(timeline_, locals, algorithm.timeline_phase(), start);
    if (!error.empty()) return failed(error);
    FinishReduction(e.output, e.output, total, spec.dtype, spec.op, spec.postscale, ctx.size);
    return "";
  }

  // A fused batch, every tensor held here and no prescale: reduce the tensors where they are.
  const bool all_local = std::find(locals.begin(), locals.end(), nullptr) == locals.end();
  if (algorithm.takes_pieces() && all_local && spec.prescale == 1.0 && !adasum) {
    pieces_.clear();
    for (size_t i = 0; i < batch.parts.size(); ++i) {
      const int64_t bytes = batch.parts[i]->Elements() * static_cast<int64_t>(element);
      if (bytes > 0) pieces_.push_back(BufferPiece{static_cast<const uint8_t *>(locals[i]->input),
                                                   static_cast<uint8_t *>(locals[i]->output), bytes});
    }
    const size_t tensor_pieces = pieces_.size();
    if (trailer) pieces_.push_back(BufferPiece{trailer->values, trailer->values, trailer_bytes});
    auto start = Clock::now();
    std::string error = algorithm.RunPieces(ctx, pieces_, total, spec.dtype, spec.op);
    RecordPhase(timeline_, locals, algorithm.timeline_phase(), start);
    if (!error.empty()) return failed(error);
    for (size_t i = 0; i < tensor_pieces; ++i) {
      const BufferPiece &piece = pieces_[i];
      FinishReduction(piece.output, piece.output, piece.bytes / static_cast<int64_t>(element), spec.dtype, spec.op,
                      spec.postscale, ctx.size);
    }
    return "";
  }

  auto start = Clock::now();
  const int64_t buffer_bytes = batch.total_bytes + trailer_bytes;
  if (static_cast<int64_t>(fusion_buffer_.size()) < buffer_bytes) fusion_buffer_.resize(buffer_bytes);
  uint8_t *buffer = fusion_buffer_.data();
  int64_t offset = 0;
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    int64_t count = batch.parts[i]->Elements();
    if (locals[i]) ScaleCopy(buffer + offset, locals[i]->input, count, spec.dtype, spec.prescale);
    else std::memset(buffer + offset, 0, count * element);  // joined rank: contributes zeros
    offset += count * static_cast<int64_t>(element);
  }
  if (trailer) std::memcpy(buffer + batch.total_bytes, trailer->values, trailer_bytes);
  RecordPhase(timeline_, locals, "MEMCPY_IN_FUSION_BUFFER", start);

  start = Clock::now();
  std::string error;
  if (adasum) {
    tensor_counts_.clear();
    for (const Response *part : batch.parts) tensor_counts_.push_back(part->Elements());
    error = adasum_.Run(ctx, buffer, tensor_counts_, spec.dtype);
  } else {
    error = algorithm.Run(ctx, buffer, total, spec.dtype, spec.op);
  }
  RecordPhase(timeline_, locals, adasum ? "ADASUM_ALLREDUCE" : algorithm.timeline_phase(), start);
  if (!error.empty()) return failed(error);
  if (trailer) std::memcpy(trailer->values, buffer + batch.total_bytes, trailer_bytes);

  start = Clock::now();
  offset = 0;
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    int64_t count = batch.parts[i]->Elements();
    if (locals[i]) {
      FinishReduction(locals[i]->output, buffer + offset, count, spec.dtype, spec.op, spec.postscale, ctx.size);
    }
    offset += count * static_cast<int64_t>(element);
  }
  RecordPhase(timeline_, locals, "MEMCPY_OUT_FUSION_BUFFER", start);
  return "";
}

}  // namespace hvdlite
