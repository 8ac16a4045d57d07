#include "algorithms/hierarchical_allreduce.h"

#include "base/mpi_types.h"

namespace hvdlite {

void HierarchicalAllreduce::SetTopology(const CommContext &local, const CommContext &cross, bool direct_within_host,
                                        int64_t cross_ring_min_bytes, TcpRingAllreduce *tcp_ring) {
  tcp_ring_ = tcp_ring;
  local_ = local;
  cross_ = cross;
  direct_within_host_ = direct_within_host;
  cross_ring_min_bytes_ = cross_ring_min_bytes;
}

std::string HierarchicalAllreduce::RunPieces(const CommContext & /*ctx*/, const std::vector<BufferPiece> &pieces,
                                             int64_t count, DataType dtype, ReduceOp op) {
  // One rank per host: the ring across hosts alone, reading the inputs where they are (the local halves would
  // first copy every input to its output).
  if (local_.size == 1) return CrossRing(pieces, count, dtype, op);
  if (!direct_within_host_) return local_ring_.RunPieces(local_, pieces, count, dtype, op, this);
  std::string error = local_direct_.RunPieces(local_, pieces, count, dtype, op, this);
  // The direct algorithm agrees on failures within the host; the ranks with this local rank on other hosts
  // learn it here, so that no host returns a result that another host's failure spoiled.
  int failed = error.empty() ? 0 : 1;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, cross_.comm);
  if (failed && error.empty()) error = "hierarchical all-reduce: the reduction failed on another host (see its error)";
  return error;
}

std::string HierarchicalAllreduce::RunOnShare(const BufferLayout &layout, int64_t begin, int64_t bytes,
                                              DataType dtype, ReduceOp op, ShareHalves *halves) {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (halves && tcp_ring_ && cross_.size > 1 && bytes >= cross_ring_min_bytes_) {
    // The ring runs the halves within the host in its waits for the network.
    return tcp_ring_->RunPieces(cross_, SharePieces(layout, begin, bytes), bytes / element, dtype, op, halves);
  }
  // Everywhere else they come before and after the step across hosts.
  if (halves && !halves->Prepare(0, bytes)) halves = nullptr;  // it keeps its error; the step runs anyway
  std::string error = AcrossHosts(layout, begin, bytes, dtype, op);
  if (halves && error.empty()) (void)halves->Deliver(0, bytes);
  return error;
}

std::string HierarchicalAllreduce::AcrossHosts(const BufferLayout &layout, int64_t begin, int64_t bytes,
                                               DataType dtype, ReduceOp op) {
  if (cross_.size == 1 || bytes == 0) return "";
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  if (bytes < cross_ring_min_bytes_) {
    // Small: MPI's own all-reduce (latency-bound), on the share packed.
    if (static_cast<int64_t>(packed_.size()) < bytes) packed_.resize(bytes);
    layout.Gather(begin, bytes, /*input=*/false, packed_.data());
    const MpiTypes &types = GlobalMpiTypes();
    MPI_Allreduce(MPI_IN_PLACE, packed_.data(), static_cast<int>(bytes / element), types.Datatype(dtype),
                  types.Op(dtype, op), cross_.comm);
    layout.Scatter(begin, bytes, packed_.data());
    return "";
  }
  return CrossRing(SharePieces(layout, begin, bytes), bytes / element, dtype, op);
}

const std::vector<BufferPiece> &HierarchicalAllreduce::SharePieces(const BufferLayout &layout, int64_t begin,
                                                                   int64_t bytes) {
  share_.clear();
  layout.ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    uint8_t *at = layout.Address(i, /*input=*/false) + skip;
    share_.push_back(BufferPiece{at, at, take});
  });
  return share_;
}

}  // namespace hvdlite
