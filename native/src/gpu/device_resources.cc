#include "gpu/device_resources.h"

#include "gpu/gpu_libraries.h"

namespace hvdlite::gpu {
namespace {

std::mutex context_mutex;
std::vector<CUcontext> contexts;  // per device, retained once and kept for the process

}  // namespace

bool UseDevice(int32_t device, std::string *why) {
  const CudaDriverFunctions &cu = Driver();
  CUcontext context = nullptr;
  {
    std::lock_guard<std::mutex> lock(context_mutex);
    if (device < 0) {
      *why = "invalid GPU " + std::to_string(device);
      return false;
    }
    if (contexts.size() <= static_cast<size_t>(device)) contexts.resize(device + 1, nullptr);
    if (!contexts[device]) {
      CUdevice handle = 0;
      CUresult result = cu.cuDeviceGet(&handle, device);
      if (result == kCudaSuccess) result = cu.cuDevicePrimaryCtxRetain(&contexts[device], handle);
      if (result != kCudaSuccess) {
        *why = "GPU " + std::to_string(device) + ": " + CudaErrorText(result);
        return false;
      }
    }
    context = contexts[device];
  }
  CUresult result = cu.cuCtxSetCurrent(context);
  if (result != kCudaSuccess) {
    *why = "GPU " + std::to_string(device) + ": cuCtxSetCurrent: " + CudaErrorText(result);
    return false;
  }
  return true;
}

EventPool &EventPool::Get() {
  static EventPool *pool = new EventPool;  // never destroyed: handles may release events during exit
  return *pool;
}

CUevent EventPool::Acquire(int32_t device, std::string *why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<size_t>(device) < free_.size() && !free_[device].empty()) {
      CUevent event = free_[device].back();
      free_[device].pop_back();
      return event;
    }
  }
  CUevent event = nullptr;
  CUresult result = Driver().cuEventCreate(&event, kEventDisableTiming);
  if (result != kCudaSuccess) {
    *why = "GPU " + std::to_string(device) + ": cuEventCreate: " + CudaErrorText(result);
    return nullptr;
  }
  return event;
}

CUevent RecordReadyEvent(int32_t device, void *stream, std::string *why) {
  if (!GpuCollectivesAvailable(why) || !UseDevice(device, why)) return nullptr;
  CUevent event = EventPool::Get().Acquire(device, why);
  if (!event) return nullptr;
  CUresult result = Driver().cuEventRecord(event, static_cast<CUstream>(stream));
  if (result != kCudaSuccess) {
    *why = "GPU " + std::to_string(device) + ": cuEventRecord on the tensor's stream: " + CudaErrorText(result);
    EventPool::Get().Release(device, event);
    return nullptr;
  }
  return event;
}

void EventPool::Release(int32_t device, CUevent event) {
  if (!event) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_.size() <= static_cast<size_t>(device)) free_.resize(device + 1);
  free_[device].push_back(event);
}

}  // namespace hvdlite::gpu
