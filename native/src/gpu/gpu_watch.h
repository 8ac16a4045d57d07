// A GPU collective is only enqueued by the background thread: its handle completes at once, and the framework's
// stream waits on its done event. What can still go wrong happens on the GPU later: a peer dies and NCCL reports
// an asynchronous error, or the collective never ends. A watch thread wakes once a second (a timed wait on a
// condition variable) and asks NCCL for each communicator's asynchronous error and the driver whether its newest
// done event has completed. On an error, or a collective unfinished for longer than the progress timeout, it says
// which tensors on stderr, aborts the communicator (so that nothing stays blocked in it) and ends this process,
// so that the launcher ends the job on every host, as the progress watchdog does for MPI.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/device_resources.h"
#include "base/types.h"

namespace hvdlite::gpu {

class GpuWatch {
 public:
  GpuWatch(int rank, double timeout_seconds) : rank_(rank), timeout_seconds_(timeout_seconds) {}
  ~GpuWatch() { Stop(); }
  GpuWatch(const GpuWatch &) = delete;
  GpuWatch &operator=(const GpuWatch &) = delete;

  // Background thread: a collective on comm was enqueued; done completes when it has finished on the GPU.
  void Launched(ncclComm_t comm, std::shared_ptr<DoneEvent> done, const std::string &what);
  // Before a communicator is destroyed.
  void Forget(ncclComm_t comm);
  void Stop();

 private:
  // A communicator's newest collective, and the one the watch waits for: once that one finished, the newest
  // becomes the next to wait for. A collective older than the timeout and not finished is stuck (one that
  // finished in time is never blamed for the ones enqueued after it).
  struct Watched {
    ncclComm_t comm;
    std::shared_ptr<DoneEvent> newest;
    Clock::time_point newest_at;
    std::string newest_what;
    std::shared_ptr<DoneEvent> waiting;
    Clock::time_point waiting_at;
    std::string waiting_what;
  };
  void Watch();
  [[noreturn]] void Fail(const Watched &w, const std::string &why);

  const int rank_;
  const double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::vector<Watched> watched_;
  std::thread thread_;
};

}  // namespace hvdlite::gpu
