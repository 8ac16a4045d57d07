// What every thread that touches a GPU shares: each device's primary context (the one PyTorch's runtime uses,
// so that streams and events are interchangeable with the framework's), and a pool of events per device.
// Events order work across streams without the host waiting: a ready event recorded on the framework's stream
// at submission, a done event recorded on the core's stream after the collective.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/gpu_declarations.h"

namespace hvdlite::gpu {

// Makes device's primary context current on the calling thread (retained on first use); false with why.
bool UseDevice(int32_t device, std::string *why);

class EventPool {
 public:
  static EventPool &Get();
  // An event of device (its context current on this thread, see UseDevice), or null with why.
  CUevent Acquire(int32_t device, std::string *why);
  // Back to the pool; re-recording it later does not disturb a wait already enqueued on it.
  void Release(int32_t device, CUevent event);

 private:
  std::mutex mutex_;
  std::vector<std::vector<CUevent>> free_;  // per device
};

// Submission, on the caller's thread: an event of device recorded on stream (after the work the caller
// enqueued there so far), or null with why (also where the GPU libraries are not available).
CUevent RecordReadyEvent(int32_t device, void *stream, std::string *why);

// A done event shared by the handles of one batch: back to the pool once the last of them lets go.
struct DoneEvent {
  DoneEvent(int32_t device, CUevent event) : device(device), event(event) {}
  ~DoneEvent() { EventPool::Get().Release(device, event); }
  DoneEvent(const DoneEvent &) = delete;
  DoneEvent &operator=(const DoneEvent &) = delete;
  const int32_t device;
  const CUevent event;
};

}  // namespace hvdlite::gpu
