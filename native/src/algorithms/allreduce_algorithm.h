// The interface every all-reduce algorithm implements, and what it runs on.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/copy_bytes.h"
#include "base/types.h"
#include "algorithms/buffer_layout.h"
#include "base/comm_context.h"

namespace hvdlite {

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  virtual const char *name() const = 0;
  virtual const char *timeline_phase() const = 0;
  // In place: buffer holds this rank's input and ends with the reduction, bitwise equal on all ranks.
  // kAverage reduces as a sum; the caller divides. Each returns an error message (the same kind of failure
  // on every rank), or an empty string.
  [[nodiscard]] virtual std::string Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // input -> output (they may be the same buffer). By default: copy, then in place; algorithms that can
  // read the input where they first need it skip that copy.
  [[nodiscard]] virtual std::string RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count,
                                            DataType dtype, ReduceOp op) {
    if (input != output) CopyBytes(output, input, static_cast<size_t>(count) * DataTypeSize(dtype));
    return Run(ctx, output, count, dtype, op);
  }
  // Whether RunPieces can reduce a fused batch where its tensors are (else the caller packs it into one
  // buffer first).
  virtual bool takes_pieces() const { return false; }
  // The pieces laid end to end (count elements in all; every rank's pieces have the same sizes).
  [[nodiscard]] virtual std::string RunPieces(const CommContext & /*ctx*/, const std::vector<BufferPiece> & /*pieces*/,
                                              int64_t /*count*/, DataType /*dtype*/, ReduceOp /*op*/) {
    return std::string(name()) + " all-reduce cannot reduce a batch in pieces";
  }
};

// The halves within a host of a hierarchical all-reduce, over one rank's share of a batch, handed to the step
// across hosts so that it can run them in its waits for the network: Prepare reduces bytes of the share within
// the host (the reduce-scatter), Deliver hands bytes that are final to the host's other ranks (the all-gather).
// Offsets are within the share; each byte is prepared once before the step reads it and delivered once after it
// is final. Either returns false after a failure (error()); the step then goes on without them, for its peers on
// other hosts.
class ShareHalves {
 public:
  virtual ~ShareHalves() = default;
  [[nodiscard]] virtual bool Prepare(int64_t begin, int64_t bytes) = 0;
  [[nodiscard]] virtual bool Deliver(int64_t begin, int64_t bytes) = 0;
  virtual const std::string &error() const = 0;
};

// Work on the share of a batch that one rank holds, between the reduce-scatter and the all-gather of an
// algorithm that has those halves (ring, direct): a hierarchical all-reduce reduces the share across hosts
// there. The share is bytes [begin, begin + bytes) of the layout's outputs. With halves, the share is not yet
// reduced within the host: the step prepares each byte before it reads it and delivers it once final
// (ShareHalves); without, it is. It runs on every rank, also after a local failure (its peers on other hosts
// wait for it); the caller reports the failure afterwards. Not for one rank or an empty batch, which those
// algorithms only copy (one rank per host takes the ring across hosts instead: HierarchicalAllreduce).
class ShareStep {
 public:
  virtual ~ShareStep() = default;
  [[nodiscard]] virtual std::string RunOnShare(const BufferLayout &layout, int64_t begin, int64_t bytes,
                                               DataType dtype, ReduceOp op, ShareHalves *halves) = 0;
};

// An algorithm written over pieces: one buffer is the batch of one piece.
class PiecewiseAllreduce : public AllreduceAlgorithm {
 public:
  std::string Run(const CommContext &ctx, void *buffer, int64_t count, DataType dtype, ReduceOp op) final {
    return RunFrom(ctx, buffer, buffer, count, dtype, op);
  }
  std::string RunFrom(const CommContext &ctx, const void *input, void *output, int64_t count, DataType dtype,
                      ReduceOp op) final {
    single_.assign(1, BufferPiece{static_cast<const uint8_t *>(input), static_cast<uint8_t *>(output),
                                  count * static_cast<int64_t>(DataTypeSize(dtype))});
    return RunPieces(ctx, single_, count, dtype, op);
  }
  bool takes_pieces() const final { return true; }

 protected:
  // One rank, or nothing to reduce: outputs are the inputs.
  static bool CopyIfTrivial(const CommContext &ctx, const std::vector<BufferPiece> &pieces, int64_t count) {
    if (ctx.size > 1 && count > 0) return false;
    for (const BufferPiece &p : pieces) {
      if (p.input != p.output) CopyBytes(p.output, p.input, static_cast<size_t>(p.bytes));
    }
    return true;
  }

 private:
  std::vector<BufferPiece> single_;  // reused: no allocation per call
};

}  // namespace hvdlite
