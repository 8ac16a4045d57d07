// What a collective hands back in memory the core allocates (allgather, alltoall): held out of line by the
// request's entry, then by its handle, so that the entries and handles of all-reduces, which have none, stay a
// cache line or two that a fused step of hundreds of tensors touches once each.
#pragma once
#include <cstdint>
#include <vector>

namespace hvdlite {

struct CoreResults {
  std::vector<uint8_t> output;
  std::vector<int64_t> output_shape;
  std::vector<int32_t> received_splits;
};

}  // namespace hvdlite
