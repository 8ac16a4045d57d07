// A fused batch seen as one virtual buffer: its tensors (pieces) laid end to end, each read from its own
// input and written to its own output. Algorithms that reduce a batch where its tensors are walk byte
// ranges of this buffer run by run instead of copying the batch into one fusion buffer. A run is a piece, or
// pieces that follow each other in memory on both sides (views of one buffer, into views of another): the
// kernels then stream them as one.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/types.h"

namespace hvdlite {

struct BufferPiece {
  const uint8_t *input;
  uint8_t *output;  // may be input
  int64_t bytes;
};

class BufferLayout {
 public:
  // Reuses its tables: no allocation once it has seen the largest batch. merge: pieces that follow each other on
  // both sides become one run (else each piece is a run of its own, as another rank's same batch is laid out).
  void Reset(const std::vector<BufferPiece> &pieces, bool merge = true);

  // f(run index, offset in the run, bytes) for each run's part of [begin, begin + bytes), in order. An f that
  // returns bool stops the walk by returning false.
  template <typename F>
  void ForEachRun(int64_t begin, int64_t bytes, F f) const {
    for (size_t i = PieceAt(begin); bytes > 0; ++i) {
      const int64_t skip = begin - begin_[i];
      const int64_t take = std::min(bytes, runs_[i].bytes - skip);
      if (take <= 0) continue;  // an empty piece
      if constexpr (std::is_same_v<decltype(f(i, skip, take)), bool>) {
        if (!f(i, skip, take)) return;
      } else {
        f(i, skip, take);
      }
      begin += take;
      bytes -= take;
    }
  }

  // The address of [begin, begin + bytes) when one run holds all of it, else null.
  uint8_t *InOnePiece(int64_t begin, int64_t bytes, bool input) const {
    const size_t i = PieceAt(begin);
    const int64_t offset = begin - begin_[i];
    return offset + bytes <= runs_[i].bytes ? Address(i, input) + offset : nullptr;
  }

  uint8_t *Address(size_t i, bool input) const {
    const BufferPiece &p = runs_[i];
    return input ? const_cast<uint8_t *>(p.input) : p.output;
  }

  // Copies [begin, begin + bytes) of the inputs (or outputs) to `to`, contiguous.
  void Gather(int64_t begin, int64_t bytes, bool input, uint8_t *to) const;

  // Copies contiguous `from` to the outputs over [begin, begin + bytes).
  void Scatter(int64_t begin, int64_t bytes, const uint8_t *from) const;

  // output = (input, or output with from_output) (op) received over [begin, begin + bytes), piece by piece;
  // received is contiguous.
  void Reduce(int64_t begin, int64_t bytes, const uint8_t *received, bool from_output, DataType dtype,
              ReduceOp op) const;

 private:
  size_t PieceAt(int64_t byte) const {  // the run holding byte (the last one for the end)
    size_t i = std::upper_bound(begin_.begin(), begin_.end(), byte) - begin_.begin();
    return std::min(i == 0 ? 0 : i - 1, runs_.size() - 1);
  }

  // Starts loading the pages of the run a little after run i (its inputs or outputs).
  void PrefetchPages(size_t i, bool input, bool write) const;

  std::vector<BufferPiece> runs_;
  std::vector<int64_t> begin_;  // begin_[i]: where run i starts in the virtual buffer
};

}  // namespace hvdlite
