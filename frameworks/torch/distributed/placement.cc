#include "placement.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <map>
#include <mutex>

#include "hvdlite.h"

namespace hvdlite_c10d {

namespace {

std::atomic<void *> double_stream{nullptr};  // the test double's stream; null when the switch is off

// One stream per GPU for the Works of every process group: it only ever waits for the core's collectives and
// copies results, so sharing it costs nothing and keeps the number of streams fixed.
c10::Stream WorkStream(int device) {
  static std::mutex mutex;
  static std::map<int, c10::Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = streams.find(device);
  if (found != streams.end()) return found->second;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  c10::Stream stream = impl.getStreamFromGlobalPool(c10::Device(c10::DeviceType::CUDA, device), false);
  streams.emplace(device, stream);
  return stream;
}

}  // namespace

Placement PlacementOf(const std::vector<at::Tensor> &tensors, const char *collective,
                      const std::string &gpu_unavailable) {
  Placement placement;
  if (tensors.empty()) return placement;
  if (void *stream = double_stream.load()) {
    placement.gpu = true;
    placement.device = 0;
    placement.stream = stream;
    return placement;
  }
  const c10::Device first = tensors[0].device();
  for (const at::Tensor &t : tensors) {
    TORCH_CHECK_VALUE(t.device() == first, "hvdlite: ", collective, " takes tensors of one device; got ", first,
                      " and ", t.device());
  }
  if (first.is_cpu()) return placement;
  TORCH_CHECK(first.is_cuda(), "hvdlite: ", collective, " takes CPU or CUDA tensors; got one on ", first);
  TORCH_CHECK(gpu_unavailable.empty(), "hvdlite: ", collective, " of CUDA tensors needs NCCL, which hvdlite could not "
              "load in this process: ", gpu_unavailable, ". Or put CUDA tensors on torch's NCCL backend: "
              "init_process_group(backend=\"cpu:hvdlite,cuda:nccl\")");
  placement.gpu = true;
  placement.device = first.index();
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  placement.stream = impl.getStream(first).native_handle();
  placement.work_stream = WorkStream(first.index());
  return placement;
}

void OrderAfterCore(const Placement &placement, const std::vector<int64_t> &handles) {
  char error[1024] = {0};
  for (int64_t handle : handles) {
    const int code = placement.work_stream
                         ? hvdlite_gpu_stream_wait(handle, placement.work_stream->native_handle(), error, sizeof(error))
                         : hvdlite_gpu_host_wait(handle, error, sizeof(error));
    TORCH_CHECK(code == 0, "hvdlite: ordering after the core's NCCL collective: ", error);
  }
}

void RecordOnWorkStream(const Placement &placement, const std::vector<at::Tensor> &tensors) {
  if (!placement.work_stream) return;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  for (const at::Tensor &t : tensors) {
    if (t.defined() && t.is_cuda() && t.has_storage()) {
      impl.recordDataPtrOnStream(t.storage().data_ptr(), *placement.work_stream);
    }
  }
}

void UseGpuDoubles(void *stream) { double_stream.store(stream); }

}  // namespace hvdlite_c10d
