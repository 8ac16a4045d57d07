#include "buffer_layout.h"

#include "../reduce_kernels.h"

namespace hvdlite {

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
