#include "buffer_layout.h"

#include <cstring>

#include "../reduce_kernels.h"

namespace hvdlite {

void BufferLayout::Gather(int64_t begin, int64_t bytes, bool input, uint8_t *to) const {
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    std::memcpy(to, Address(i, input) + skip, static_cast<size_t>(take));
    to += take;
  });
}

void BufferLayout::Scatter(int64_t begin, int64_t bytes, const uint8_t *from) const {
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    std::memcpy(Address(i, /*input=*/false) + skip, from, static_cast<size_t>(take));
    from += take;
  });
}

void BufferLayout::Reduce(int64_t begin, int64_t bytes, const uint8_t *received, bool from_output, DataType dtype,
                          ReduceOp op) const {
  const int64_t element = static_cast<int64_t>(DataTypeSize(dtype));
  ForEachRun(begin, bytes, [&](size_t i, int64_t skip, int64_t take) {
    const BufferPiece &p = (*pieces_)[i];
    ReduceTo(p.output + skip, (from_output ? p.output : p.input) + skip, received, take / element, dtype, op);
    received += take;
  });
}

}  // namespace hvdlite
