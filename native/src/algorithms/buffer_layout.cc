#include "algorithms/buffer_layout.h"

#include "base/copy_bytes.h"
#include "base/reduce_kernels.h"

namespace hvdlite {
namespace {

// The tensors of a batch are separate allocations, mostly in 4 KiB pages, where one big tensor often has huge
// pages: the hardware prefetcher stops at every page, and every page costs a TLB walk. Touching one line per
// page of the pieces a little ahead starts those walks and loads early (measured faster for a batch of many
// small tensors gathered then scattered).
constexpr size_t kPiecesAhead = 2;
constexpr int64_t kPage = 4096;
constexpr int64_t kMaxAheadBytes = 64 << 10;  // a large piece streams well enough on its own

}  // namespace

void BufferLayout::Reset(const std::vector<BufferPiece> &pieces, bool merge) {
  runs_.clear();
  for (const BufferPiece &p : pieces) {
    BufferPiece *last = runs_.empty() || !merge ? nullptr : &runs_.back();
    if (last && last->input + last->bytes == p.input && last->output + last->bytes == p.output) {
      last->bytes += p.bytes;  // the same bytes in the same order: one stream for the kernels
    } else {
      runs_.push_back(p);
    }
  }
  begin_.resize(runs_.size() + 1);
  begin_[0] = 0;
  for (size_t i = 0; i < runs_.size(); ++i) begin_[i + 1] = begin_[i] + runs_[i].bytes;
}

void BufferLayout::PrefetchPages(size_t i, bool input, bool write) const {
  i += kPiecesAhead;
  if (i >= runs_.size()) return;
  const uint8_t *at = Address(i, input);
  const int64_t bytes = std::min(runs_[i].bytes, kMaxAheadBytes);
  for (int64_t offset = 0; offset < bytes; offset += kPage) {
    if (write) {
      __builtin_prefetch(at + offset, 1);
    } else {
      __builtin_prefetch(at + offset, 0);
    }
  }
}

void BufferLayout::Gather(int64_t begin, int64_t bytes, bool input, uint8_t *to) const {
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    PrefetchPages(i, input, /*write=*/false);
    CopyBytes(to, Address(i, input) + skip, static_cast<size_t>(take));
    to += take;
  });
}

void BufferLayout::Scatter(int64_t begin, int64_t bytes, const uint8_t *from) const {
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    PrefetchPages(i, /*input=*/false, /*write=*/true);
    CopyBytes(Address(i, /*input=*/false) + skip, from, static_cast<size_t>(take));
    from += take;
  });
}

void BufferLayout::Reduce(int64_t begin, int64_t bytes, const uint8_t *received, bool from_output, DataType dtype,
                          ReduceOp op) const {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    const BufferPiece &p = runs_[i];
    PrefetchPages(i, /*input=*/!from_output, /*write=*/false);
    if (!from_output) PrefetchPages(i, /*input=*/false, /*write=*/true);  // where the result goes
    ReduceTo(p.output + skip, (from_output ? p.output : p.input) + skip, received, take / element, dtype, op);
    received += take;
  });
}

}  // namespace hvdlite
