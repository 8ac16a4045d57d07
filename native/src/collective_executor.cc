#include "collective_executor.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>

#include "copy_bytes.h"
#include "mpi_types.h"
#include "progress_watchdog.h"
#include "reduce_kernels.h"

namespace hvdlite {
namespace {

bool FitsInt(int64_t v) { return v <= INT_MAX; }

}  // namespace

CollectiveExecutor::CollectiveExecutor(const AlgorithmSettings &settings, const HostLayout &layout,
                                       Timeline &timeline)
    : settings_(settings),
      layout_(layout),
      timeline_(timeline),
      ring_(settings.ring_segment_bytes),
      hierarchical_(direct_, ring_, settings.ring_segment_bytes) {
  hierarchical_.SetTopology(layout.local, layout.cross, layout.direct_within_host,
                            settings.auto_cross_host_ring_min_bytes);
}

AllreduceAlgorithm &CollectiveExecutor::Choose(int64_t bytes, bool global_set) {
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

void CollectiveExecutor::Record(const std::vector<Entry *> &locals, const char *phase, Clock::time_point start) {
  if (!timeline_.active()) return;
  auto end = Clock::now();
  for (const Entry *e : locals) {
    if (e) timeline_.Record(e->request.name, phase, start, end);
  }
}

std::string CollectiveExecutor::Execute(const ProcessSet &set, const FusedBatch &batch,
                                        const std::vector<Entry *> &locals) {
  CommContext ctx{set.comm, set.rank, set.size};
  const Response &head = *batch.parts.front();
  auto start = Clock::now();
  std::string error;
  if (head.spec.gpu) {
    if (!gpu_) gpu_ = std::make_unique<gpu::NcclExecutor>(layout_.rank, layout_.local_rank,
                                                          settings_.progress_timeout_seconds);
    error = gpu_->Execute(set.id, ctx, batch, locals);
    Record(locals, gpu::NcclExecutor::TimelinePhase(head.spec.collective), start);
    return error;
  }
  switch (head.spec.collective) {
    case Collective::kAllreduce: return Allreduce(ctx, batch, locals, set.id == 0);
    case Collective::kAllgather: error = Allgather(ctx, head, *locals[0]); break;
    case Collective::kBroadcast: error = Broadcast(ctx, head, *locals[0]); break;
    case Collective::kAlltoall: error = Alltoall(ctx, head, *locals[0]); break;
    case Collective::kReducescatter: error = Reducescatter(ctx, head, *locals[0]); break;
    case Collective::kBarrier: MPI_Barrier(ctx.comm); break;
    default: error = "internal error: unexpected collective in a batch"; break;
  }
  Record(locals, CollectiveName(head.spec.collective), start);
  return error;
}

std::string CollectiveExecutor::Allreduce(const CommContext &ctx, const FusedBatch &batch,
                                          const std::vector<Entry *> &locals, bool global_set) {
  const Request &spec = batch.parts.front()->spec;
  const size_t element = DataTypeSize(spec.dtype);
  const int64_t total = batch.total_bytes / static_cast<int64_t>(element);
  AllreduceAlgorithm &algorithm = Choose(batch.total_bytes, global_set);
  const bool adasum = spec.op == ReduceOp::kAdasum;  // combines tensor by tensor: always through the buffer

  auto failed = [&](const std::string &error) {
    return "all-reduce of '" + spec.name + "'" +
           (batch.parts.size() > 1 ? " (fused with " + std::to_string(batch.parts.size() - 1) + " more)" : "") +
           ": " + error;
  };

  // One tensor that this rank holds: reduce in its output directly, no fusion-buffer copies.
  if (batch.parts.size() == 1 && locals[0] && !adasum) {
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
    Record(locals, algorithm.timeline_phase(), start);
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
    auto start = Clock::now();
    std::string error = algorithm.RunPieces(ctx, pieces_, total, spec.dtype, spec.op);
    Record(locals, algorithm.timeline_phase(), start);
    if (!error.empty()) return failed(error);
    for (const BufferPiece &piece : pieces_) {
      FinishReduction(piece.output, piece.output, piece.bytes / static_cast<int64_t>(element), spec.dtype, spec.op,
                      spec.postscale, ctx.size);
    }
    return "";
  }

  auto start = Clock::now();
  if (static_cast<int64_t>(fusion_buffer_.size()) < batch.total_bytes) fusion_buffer_.resize(batch.total_bytes);
  uint8_t *buffer = fusion_buffer_.data();
  int64_t offset = 0;
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    int64_t count = batch.parts[i]->Elements();
    if (locals[i]) ScaleCopy(buffer + offset, locals[i]->input, count, spec.dtype, spec.prescale);
    else std::memset(buffer + offset, 0, count * element);  // joined rank: contributes zeros
    offset += count * static_cast<int64_t>(element);
  }
  Record(locals, "MEMCPY_IN_FUSION_BUFFER", start);

  start = Clock::now();
  std::string error;
  if (adasum) {
    tensor_counts_.clear();
    for (const Response *part : batch.parts) tensor_counts_.push_back(part->Elements());
    error = adasum_.Run(ctx, buffer, tensor_counts_, spec.dtype);
  } else {
    error = algorithm.Run(ctx, buffer, total, spec.dtype, spec.op);
  }
  Record(locals, adasum ? "ADASUM_ALLREDUCE" : algorithm.timeline_phase(), start);
  if (!error.empty()) return failed(error);

  start = Clock::now();
  offset = 0;
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    int64_t count = batch.parts[i]->Elements();
    if (locals[i]) {
      FinishReduction(locals[i]->output, buffer + offset, count, spec.dtype, spec.op, spec.postscale, ctx.size);
    }
    offset += count * static_cast<int64_t>(element);
  }
  Record(locals, "MEMCPY_OUT_FUSION_BUFFER", start);
  return "";
}

std::string CollectiveExecutor::Allgather(const CommContext &ctx, const Response &response, Entry &local) {
  const Request &spec = response.spec;
  const int64_t row_bytes = local.request.RowElements() * static_cast<int64_t>(DataTypeSize(spec.dtype));
  std::vector<int> counts(ctx.size), displacements(ctx.size);
  int64_t total_rows = 0, offset = 0;
  for (int r = 0; r < ctx.size; ++r) {
    int64_t bytes = response.first_dims[r] * row_bytes;
    if (!FitsInt(bytes) || !FitsInt(offset)) return "allgather of tensor '" + spec.name + "' exceeds 2 GiB";
    counts[r] = static_cast<int>(bytes);
    displacements[r] = static_cast<int>(offset);
    offset += bytes;
    total_rows += response.first_dims[r];
  }
  CoreResults &results = *(local.results = std::make_unique<CoreResults>());
  results.output.resize(offset);
  MPI_Allgatherv(local.input, counts[ctx.rank], MPI_BYTE, results.output.data(), counts.data(),
                 displacements.data(), MPI_BYTE, ctx.comm);
  results.output_shape = local.request.shape;
  results.output_shape[0] = total_rows;
  return "";
}

std::string CollectiveExecutor::Broadcast(const CommContext &ctx, const Response &response, Entry &local) {
  const int64_t bytes = local.request.NumElements() * static_cast<int64_t>(DataTypeSize(response.spec.dtype));
  auto *out = static_cast<uint8_t *>(local.output);
  if (ctx.rank == response.spec.root_rank && local.output != local.input) CopyBytes(out, local.input, bytes);
  // In pieces, each a step of progress (progress_watchdog.h): one call for gigabytes could outlast its timeout.
  constexpr int64_t kPiece = 64 << 20;
  for (int64_t start = 0; start < bytes; start += kPiece) {
    MPI_Bcast(out + start, static_cast<int>(std::min(kPiece, bytes - start)), MPI_BYTE, response.spec.root_rank,
              ctx.comm);
    NoteProgress();
  }
  return "";
}

std::string CollectiveExecutor::Alltoall(const CommContext &ctx, const Response &response, Entry &local) {
  const Request &spec = local.request;
  const int64_t row_bytes = spec.RowElements() * static_cast<int64_t>(DataTypeSize(spec.dtype));
  std::vector<int32_t> send_rows = local.splits;
  if (send_rows.empty()) send_rows.assign(ctx.size, static_cast<int32_t>(spec.shape[0] / ctx.size));
  std::vector<int32_t> recv_rows(ctx.size);
  MPI_Alltoall(send_rows.data(), 1, MPI_INT32_T, recv_rows.data(), 1, MPI_INT32_T, ctx.comm);
  std::vector<int> send_counts(ctx.size), send_displs(ctx.size), recv_counts(ctx.size), recv_displs(ctx.size);
  int64_t send_offset = 0, recv_offset = 0, total_rows = 0;
  for (int r = 0; r < ctx.size; ++r) {
    int64_t sb = send_rows[r] * row_bytes, rb = recv_rows[r] * row_bytes;
    if (!FitsInt(send_offset + sb) || !FitsInt(recv_offset + rb)) {
      return "alltoall of tensor '" + response.spec.name + "' exceeds 2 GiB";
    }
    send_counts[r] = static_cast<int>(sb);
    send_displs[r] = static_cast<int>(send_offset);
    recv_counts[r] = static_cast<int>(rb);
    recv_displs[r] = static_cast<int>(recv_offset);
    send_offset += sb;
    recv_offset += rb;
    total_rows += recv_rows[r];
  }
  CoreResults &results = *(local.results = std::make_unique<CoreResults>());
  results.output.resize(recv_offset);
  MPI_Alltoallv(local.input, send_counts.data(), send_displs.data(), MPI_BYTE, results.output.data(),
                recv_counts.data(), recv_displs.data(), MPI_BYTE, ctx.comm);
  results.output_shape = spec.shape;
  results.output_shape[0] = total_rows;
  results.received_splits = std::move(recv_rows);
  return "";
}

std::string CollectiveExecutor::Reducescatter(const CommContext &ctx, const Response &response, Entry &local) {
  const Request &spec = response.spec;
  const int64_t rows = spec.shape[0], row_elements = spec.RowElements();
  const int64_t total = spec.NumElements();
  const size_t element = DataTypeSize(spec.dtype);
  std::vector<int> counts(ctx.size);
  for (int r = 0; r < ctx.size; ++r) {
    int64_t my_rows = rows / ctx.size + (r < rows % ctx.size ? 1 : 0);
    if (!FitsInt(my_rows * row_elements)) return "reducescatter of tensor '" + spec.name + "' is too large";
    counts[r] = static_cast<int>(my_rows * row_elements);
  }
  const void *send = local.input;
  if (spec.prescale != 1.0) {
    if (scratch_.size() < total * element) scratch_.resize(total * element);
    ScaleCopy(scratch_.data(), local.input, total, spec.dtype, spec.prescale);
    send = scratch_.data();
  }
  const MpiTypes &types = GlobalMpiTypes();
  MPI_Reduce_scatter(send, local.output, counts.data(), types.Datatype(spec.dtype), types.Op(spec.dtype, spec.op),
                     ctx.comm);
  FinishReduction(local.output, local.output, counts[ctx.rank], spec.dtype, spec.op, spec.postscale, ctx.size);
  return "";
}

}  // namespace hvdlite
