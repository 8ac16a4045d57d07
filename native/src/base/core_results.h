// What a collective hands back in memory the core allocates (allgather, alltoall), or a GPU collective's done
// event: held out of line by the request's entry, then by its handle, so that the entries and handles of CPU
// all-reduces, which have none, stay a cache line or two that a fused step of hundreds of tensors touches once
// each.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace hvdlite {

namespace gpu {
struct DoneEvent;  // gpu/device_resources.h: results hold one without the GPU's declarations
}  // namespace gpu

struct CoreResults {
  std::vector<uint8_t> output;
  std::vector<int64_t> output_shape;
  std::vector<int32_t> received_splits;
  std::shared_ptr<gpu::DoneEvent> gpu_done;  // finished on the GPU once this event has completed
};

}  // namespace hvdlite
