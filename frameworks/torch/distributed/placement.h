// Where a call's tensors live, and what a collective of CUDA tensors needs around the core's NCCL path: the
// caller's current stream (the core's stream waits for it before the collective), a stream of the Work's own that
// waits for the collective (copies into the caller's tensors and the future's events go on it), and the buffers
// recorded on that stream so that PyTorch's caching allocator does not reuse them while NCCL still uses them.
// Device-generic c10 calls only: no CUDA header, so the extension compiles against CPU and CUDA builds of PyTorch.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <optional>
#include <string>
#include <vector>

namespace hvdlite_c10d {

struct Placement {
  bool gpu = false;
  int device = -1;             // the GPU's index
  void *stream = nullptr;      // the caller's current stream there (a CUstream)
  std::optional<c10::Stream> work_stream;  // the Work's own stream (absent under the test double)
};

// The placement of one call's tensors: all on the CPU, or all on one GPU (else an error naming the collective).
// gpu_unavailable: why the core cannot run NCCL collectives in this process ("" when it can).
Placement PlacementOf(const std::vector<at::Tensor> &tensors, const char *collective,
                      const std::string &gpu_unavailable);

// Makes the Work's stream wait for the core's collectives of handles (the host does not wait); under the test double
// the host waits for them instead.
void OrderAfterCore(const Placement &placement, const std::vector<int64_t> &handles);

// Records tensors' memory as in use on the Work's stream (their blocks are not reused before it gets there).
void RecordOnWorkStream(const Placement &placement, const std::vector<at::Tensor> &tensors);

// TEST DOUBLE switch (tests/gpu with the CUDA and NCCL doubles, whose "device memory" is host memory): CPU tensors
// take the GPU path as memory of device 0 written on `stream` (null: off), and the host waits where a stream would.
void UseGpuDoubles(void *stream);

}  // namespace hvdlite_c10d
